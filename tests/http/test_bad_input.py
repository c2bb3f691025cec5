"""Bad input gets a 4xx in the one error shape with a message that says what to fix, never a 500 or a hang; an
unexpected error is a 500 that says nothing about the code.
"""

from __future__ import annotations

import json

import httpx
import pytest
from service_harness import metric, scrape

BAD_REQUESTS = [
    ({}, "inputs: is required"),
    ({"inputs": ""}, "inputs"),
    ({"inputs": "   "}, "empty"),
    ({"inputs": "a " * 10_001}, "max_text_chars"),  # a long word is read in parts, a long text is refused
    ({"inputs": "\u2603 \U0001f600"}, "'\u2603'"),  # nothing readable: a text with words skips these, with warnings
    ({"inputs": "cat", "parameters": {"max_new_tokens": 0}}, "max_new_tokens"),
    ({"inputs": "cat", "parameters": {"max_new_tokens": 49}}, "between 1 and 48"),
    ({"inputs": "cat", "parameters": {"do_sample": True, "temperature": 0}}, "temperature must be > 0"),
    ({"inputs": "cat", "parameters": {"temperature": -1.0}}, "temperature must be > 0"),
    ({"inputs": "cat", "parameters": {"top_p": 0}}, "top_p"),
    ({"inputs": "cat", "parameters": {"top_p": 1.5}}, "top_p"),
    ({"inputs": "cat", "parameters": {"top_k": -1}}, "top_k"),
    ({"inputs": "cat", "parameters": {"seed": -1}}, "seed"),
    ({"inputs": "cat", "parameters": {"repetition_penalty": 0}}, "repetition_penalty"),
    ({"inputs": 5}, "inputs"),
    ({"inputs": "cat", "parameters": "fast"}, "parameters"),
    ({"inputs": "cat", "parameters": {"max_new_tokens": "many"}}, "max_new_tokens"),
    ({"inputs": "cat", "parameters": {"stop": "N"}}, "stop"),
    (["cat"], "JSON object"),
]


@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
def test_every_bad_input_gets_422_with_a_message(url, route):
    for body, needle in BAD_REQUESTS:
        r = httpx.post(url + route, json=body, timeout=30)
        assert r.status_code == 422, (body, r.status_code, r.text)
        err = r.json()
        assert set(err) == {"error", "error_type"}, err
        assert err["error_type"] == "validation"
        assert needle in err["error"], (body, err)


def test_a_word_longer_than_the_model_reads_is_read_in_parts_and_named(url):
    r = httpx.post(url + "/generate", json={"inputs": "a" * 60, "parameters": {"details": True}}, timeout=30)
    assert r.status_code == 200, r.text
    warnings = r.json()["details"]["warnings"]
    assert any("60" in w["message"] and "48" in w["message"] for w in warnings), warnings


def test_malformed_json_wrong_content_and_oversized_bodies(url):
    r = httpx.post(url + "/generate", content=b'{"inputs": "cat"', headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 422 and "not valid JSON" in r.json()["error"]

    before = metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="validation")
    big = json.dumps({"inputs": "a" * 300_000}).encode()
    r = httpx.post(url + "/generate", content=big, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413
    assert r.json()["error_type"] == "validation" and "larger than" in r.json()["error"]

    def chunks():
        for _ in range(40):
            yield b"a" * 10_000

    r = httpx.post(url + "/generate", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413  # no Content-Length: counted as it arrives
    # both 413s are counted, though they never reach a route handler
    assert metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="validation") - before == 2


def test_unknown_routes_and_methods_use_the_error_shape(url):
    r = httpx.get(url + "/nope", timeout=30)
    assert r.status_code == 404 and r.json()["error_type"] == "not_found"
    r = httpx.get(url + "/generate", timeout=30)
    assert r.status_code == 405 and set(r.json()) == {"error", "error_type"}


def test_openapi_fuzz_finds_no_server_error(url):
    """Property-based: schemathesis draws valid and invalid requests from /openapi.json (bounded: 100)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_dict(httpx.get(url + "/openapi.json", timeout=30).json())
    operations = [
        schema[path][method]
        for path, method in [
            ("/generate", "POST"),
            ("/generate_stream", "POST"),
            ("/", "POST"),
            ("/info", "GET"),
            ("/ready", "GET"),
        ]
    ]
    strategy = st.one_of(
        *[
            op.as_strategy(generation_mode=mode)
            for op in operations
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        ]
    )
    seen = []

    @settings(max_examples=100, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def call(case) -> None:
        response = case.call(base_url=url, timeout=60)
        seen.append(response.status_code)
        assert response.status_code < 500, (
            f"{case.method} {case.path} {case.body!r} -> {response.status_code} {response.text[:300]}"
        )
        if response.status_code >= 400:
            assert set(response.json()) == {"error", "error_type"}

    call()
    assert any(s == 200 for s in seen) and any(400 <= s < 500 for s in seen)


def test_an_unexpected_error_on_a_generation_route_is_a_500_with_the_one_shape(url, monkeypatch):
    """The generation handler answers /generate ahead of the app's error handlers: a bug still gets the front door's
    500 (no internals, the request id, counted as `internal`), and the server goes on serving."""
    from attnserve.service.http import generation as routes

    async def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    before = metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="internal")
    monkeypatch.setattr(routes, "generate_once", broken)
    r = httpx.post(url + "/generate", json={"inputs": "cat"}, headers={"x-request-id": "req-500"}, timeout=30)
    monkeypatch.undo()
    assert r.status_code == 500 and r.headers["x-request-id"] == "req-500"
    assert r.json() == {"error": "internal server error; the server log has the details", "error_type": "internal"}
    assert metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="internal") - before == 1
    assert httpx.post(url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200
