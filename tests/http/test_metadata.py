"""/info, /health, /ready, the documentation pages and TGI's response headers and request id."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from service_harness import serving


def test_info_health_ready_and_docs(url, tiny_bundle_dir):
    info = httpx.get(url + "/info", timeout=30).json()
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    assert info["model_id"] == meta["model_id"]
    assert len(info["model_sha"]) == 64
    assert info["provider"] == "CPUExecutionProvider"
    assert info["variant"] == meta["default_variant"]["cpu"]
    assert info["max_input_tokens"] == meta["max_source_len"] and info["max_batch_size"] == 8
    assert httpx.get(url + "/health", timeout=30).json() == {"status": "ok"}
    assert httpx.get(url + "/ready", timeout=30).status_code == 200
    spec = httpx.get(url + "/openapi.json", timeout=30).json()
    params = spec["components"]["schemas"]["GenerateParameters"]["properties"]
    assert {"max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "details", "repetition_penalty"} <= set(params)
    assert "StreamResponse" in spec["components"]["schemas"]
    assert "text/event-stream" in spec["paths"]["/generate_stream"]["post"]["responses"]["200"]["content"]
    assert info["model_dtype"] == "float32"  # the test bundle serves fp32


def test_docs_pages_load_every_asset_from_this_server(url):
    """/docs and /redoc work offline: no http(s):// reference, and every script, style, icon and spec they load is here."""
    for page in ("/docs", "/redoc"):
        r = httpx.get(url + page, timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), page
        assert "http://" not in r.text and "https://" not in r.text, page
        refs = re.findall(r'(?:src|href|spec-url)="([^"]+)"', r.text) + re.findall(r"url: '([^']+)'", r.text)
        assert any(ref.endswith(".js") for ref in refs) and any("favicon" in ref for ref in refs), (page, refs)
        assert "/openapi.json" in refs, (page, refs)
        for ref in refs:
            assert ref.startswith("/"), (page, ref)
            asset = httpx.get(url + ref, timeout=30)
            assert asset.status_code == 200 and len(asset.content) > 100, (page, ref, asset.status_code)


@pytest.mark.parametrize(("variant", "dtype"), [("int8", "int8"), ("fp16", "float16")])
def test_info_names_the_precision_of_the_variant_served(tiny_bundle_dir, variant, dtype):
    with serving(tiny_bundle_dir, variant=variant) as s:
        info = httpx.get(s.url + "/info", timeout=30).json()
        assert (info["variant"], info["model_dtype"]) == (variant, dtype)
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200


def test_tgi_headers_and_request_id(url):
    r = httpx.post(url + "/generate", json={"inputs": "cat"}, headers={"x-request-id": "req-42"}, timeout=30)
    assert r.headers["x-request-id"] == "req-42"
    for h in ("x-total-time", "x-queue-time", "x-inference-time", "x-time-per-token", "x-generated-tokens"):
        assert r.headers[h].isdigit(), h
    assert int(r.headers["x-generated-tokens"]) >= 1
    assert len(httpx.get(url + "/health", timeout=30).headers["x-request-id"]) == 32  # made up when not sent
    assert "x-request-id" in httpx.post(url + "/generate", json={}, timeout=30).headers
