"""The API key: required on the generation routes only, and not needed when none is set."""

from __future__ import annotations

import httpx
from service_harness import metric, scrape, serving


def test_api_key_required_on_generation_routes_only(tiny_bundle_dir):
    from huggingface_hub import InferenceClient

    with serving(tiny_bundle_dir, api_key="s3cret") as s:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            r = httpx.post(s.url + "/generate", json={"inputs": "cat"}, headers=headers, timeout=30)
            assert r.status_code == 401, headers
            assert r.json()["error_type"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
        # auth comes before validation: an unauthenticated client learns nothing about its body
        assert httpx.post(s.url + "/generate_stream", json={}, timeout=30).status_code == 401
        ok = httpx.post(s.url + "/generate", json={"inputs": "cat"}, headers={"authorization": "Bearer s3cret"}, timeout=30)
        assert ok.status_code == 200
        assert InferenceClient(base_url=s.url, api_key="s3cret").text_generation("cat") == ok.json()["generated_text"]
        for path in ("/health", "/ready"):
            assert httpx.get(s.url + path, timeout=30).status_code == 200
        assert metric(scrape(s.url), "attnserve_requests_total", outcome="unauthorized") == 4


def test_without_an_api_key_no_authorization_is_needed(url):
    assert httpx.post(url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200
    assert (
        httpx.post(url + "/generate", json={"inputs": "cat"}, headers={"authorization": "Bearer x"}, timeout=30).status_code
        == 200
    )
