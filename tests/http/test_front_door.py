"""The front door and the generation routes' one handler (service/http/generation.py): every refusal in the
route's shape, with the request id, counted in attnserve_requests_total.

A real uvicorn server on 127.0.0.1 with an API key serves the tiny bundle. Each request (malformed, oversized,
unauthorized, draining, failing, and a good one) is sent to each generation route.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from service_harness import scrape, serving

from attnserve.service.http import generation
from attnserve.service.http.openai import completions as openai_plan

KEY = "s3cret"
AUTH = {"authorization": f"Bearer {KEY}", "x-request-id": "door-1"}
JSON = {"content-type": "application/json"}
TGI = ["/generate", "/generate_stream", "/"]
OPENAI = ["/v1/completions", "/v1/chat/completions"]
GOOD = {
    "/generate": b'{"inputs": "cat", "parameters": {"details": true}}',
    "/generate_stream": b'{"inputs": "cat", "parameters": {"details": true}}',
    "/": b'{"inputs": "cat", "stream": false}',
    "/v1/completions": b'{"model": "m", "prompt": "cat", "max_tokens": 8}',
    "/v1/chat/completions": b'{"model": "m", "messages": [{"role": "user", "content": "cat"}]}',
}
STREAM = {
    "/": b'{"inputs": "cat", "stream": true}',
    "/v1/completions": b'{"model": "m", "prompt": "cat", "stream": true}',
    "/v1/chat/completions": b'{"model": "m", "messages": [{"role": "user", "content": "cat"}], "stream": true}',
}
# bodies that are not JSON, or JSON of the wrong shape
MALFORMED = [
    b'{"inputs": "cat"',  # syntax
    b'{"inputs": "\xff"}',  # not UTF-8
    b'{"inputs": "cat", "parameters": {"temperature": NaN}, "prompt": "cat", "temperature": NaN}',
    b"[" * 2000 + b"]" * 2000,  # nested too deeply
    b"",
    b'["cat"]',
    b"{}",  # the input missing
    b'{"inputs": 5, "prompt": 5, "messages": "cat", "model": 1}',  # wrong types
    b'{"inputs": "cat", "parameters": "fast", "prompt": "cat", "max_tokens": "many"}',
    b'{"inputs": "cat", "parameters": {"top_p": 1.5}, "prompt": "cat", "top_p": 1.5}',  # out of range
    b'{"inputs": "cat", "parameters": {"max_new_tokens": 0}, "prompt": "cat", "max_tokens": 0}',
]
MASKS = [
    (re.compile(rb'"id":"(chat)?cmpl-[0-9a-f]+"'), b'"id":"ID"'),
    (re.compile(rb'"created":\d+'), b'"created":0'),
]
TIMINGS = {b"x-total-time", b"x-queue-time", b"x-inference-time", b"x-time-per-token"}


@pytest.fixture(scope="module")
def server(tiny_bundle_dir):
    with serving(tiny_bundle_dir, max_batch_size=8, api_key=KEY) as s:
        yield s


def model_id(server) -> bytes:
    return server.service.engine.bundle.model_id.encode()


def outcomes(url: str) -> dict:
    return {labels: v for (name, labels), v in scrape(url).items() if name == "attnserve_requests_total"}


def exchange(server, route: str, content: bytes | Callable, headers: dict, masked: bool = False) -> tuple:
    """One request: (status, headers but Date, body, the change to attnserve_requests_total)."""
    before = outcomes(server.url)
    body = content() if callable(content) else content.replace(b'"model": "m"', b'"model": "%s"' % model_id(server))
    r = httpx.post(server.url + route, content=body, headers=headers, timeout=60)
    after = outcomes(server.url)
    sent = [(k, v) for k, v in r.headers.raw if k.lower() != b"date"]
    content = r.content
    if masked:
        sent = [(k, b"T" if k.lower() in TIMINGS else v) for k, v in sent]
        for pattern, mask in MASKS:
            content = pattern.sub(mask, content)
    counted = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    return r.status_code, sent, content, counted


def send(server, route: str, content, headers=None, masked: bool = False):
    return exchange(server, route, content, {**AUTH, **JSON, **(headers or {})}, masked)


@pytest.mark.parametrize("route", TGI + OPENAI)
def test_malformed_bodies_are_answered_in_the_routes_shape(server, route):
    for body in MALFORMED:
        status, _, content, counted = send(server, route, body)
        assert 400 <= status < 500, (body, status, content)
        # the TGI routes: 422 `validation` for a body that is not JSON too; /v1 keeps OpenAI's 400
        assert status == (422 if route in TGI else 400), (body, content)
        assert counted, body
    send(server, route, b'{"inputs": "cat", "prompt": "cat"}', {"content-type": "text/plain"})


@pytest.mark.parametrize("route", TGI + OPENAI)
def test_oversized_bodies_are_answered_in_the_routes_shape(server, route):
    big = b'{"inputs": "' + b"a" * 300_000 + b'"}'
    status, _, content, counted = send(server, route, big)
    assert status == 413 and b"larger than" in content and counted

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b"a" * 10_000

    assert send(server, route, chunks)[0] == 413


@pytest.mark.parametrize("route", TGI + OPENAI)
def test_unauthorized_requests_are_answered_in_the_routes_shape(server, route):
    for auth in ({"authorization": ""}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
        status, headers, _, counted = send(server, route, GOOD[route], auth)
        assert status == 401 and (b"www-authenticate", b"Bearer") in headers and counted
        send(server, route, b'{"inputs": "cat"', auth)


@pytest.mark.parametrize("route", TGI + OPENAI)
def test_draining_server_answers_503_draining(server, route):
    server.service.draining = True
    try:
        status, _, content, counted = send(server, route, GOOD[route])
        assert status == 503 and b"draining" in content and counted
        for body in MALFORMED[:3]:
            send(server, route, body)
    finally:
        server.service.draining = False


@pytest.mark.parametrize("route", TGI + OPENAI)
def test_good_requests_are_answered_in_the_routes_shape(server, route):
    status, headers, content, counted = send(server, route, GOOD[route], masked=True)
    assert status == 200 and (b"x-request-id", b"door-1") in headers and counted
    if route in STREAM:
        status, _, content, _ = send(server, route, STREAM[route], masked=True)
        assert status == 200 and content.startswith(b"data:")


@pytest.mark.parametrize("route", TGI + OPENAI)
def test_an_unexpected_error_is_a_500_in_the_routes_shape(server, route, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    async def broken_async(*args, **kwargs):
        raise RuntimeError("a bug")

    if route in OPENAI:
        monkeypatch.setattr(openai_plan, "completion_request", broken)
        monkeypatch.setattr(openai_plan, "chat_request", broken)
    else:
        monkeypatch.setattr(generation, "generate_once", broken_async)
        monkeypatch.setattr(server.service, "admit", broken)  # a stream's first step
    status, headers, content, counted = send(server, route, STREAM.get(route, GOOD[route]))
    assert status == 500 and b"server log" in content and (b"x-request-id", b"door-1") in headers
    assert any(("outcome", "internal") in labels for labels in counted), counted
    monkeypatch.undo()
    assert send(server, route, GOOD[route], masked=True)[0] == 200
