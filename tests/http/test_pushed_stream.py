"""A /generate_stream body, written from the engine's wake-ups (service/http/generation.py), when the
server's `send` has to wait (a client that reads slower than the server writes) and when it fails.

Each test runs `push_stream` on the test server's own event loop, with the server's real service and engine, and a
`send` of its own in place of the connection's."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from service_harness import assert_generation_stopped, scrape

from attnserve.service.http.generation import push_stream
from attnserve.service.http.responses import SSEWriter
from attnserve.service.http.schemas import GenerateRequest

BODY = {"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 24, "lexicon": False, "details": True}}


def on_server_loop(server, make_coroutine):
    return asyncio.run_coroutine_threadsafe(make_coroutine(), server.service.loop).result(timeout=60)


def admit(svc):
    return svc.admit(GenerateRequest.model_validate(BODY), stream=True)


def test_sends_that_wait_deliver_every_chunk_in_order(server):
    with httpx.Client(timeout=60) as client, client.stream("POST", server.url + "/generate_stream", json=BODY) as r:
        over_http = b"".join(r.iter_raw())
    svc = server.service

    async def slow_connection():
        sent, waited, complete = [], [], asyncio.Event()

        async def send(message):
            if message["type"] == "http.response.body" and len(sent) % 2:  # every other chunk finds the buffer full
                waited.append(True)
                await asyncio.sleep(0.005)
            sent.append(message)
            if message["type"] == "http.response.body" and not message["more_body"]:
                complete.set()

        async def receive():
            await complete.wait()  # what the server says once the response is complete
            return {"type": "http.disconnect"}

        job = admit(svc)
        await push_stream(job, SSEWriter(job, "/generate_stream", svc.metrics), [], svc.keepalive_s, receive, send)
        return sent, waited

    sent, waited = on_server_loop(server, slow_connection)
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert sent[0]["type"] == "http.response.start" and waited
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert b"".join(m["body"] for m in bodies) == over_http  # every event, in order, byte for byte


def test_a_send_that_fails_ends_the_stream_with_its_error_and_cancels_the_request(server):
    svc = server.service

    async def broken_connection():
        calls = 0

        async def send(message):
            nonlocal calls
            calls += 1
            if calls == 2:  # the first chunk of the body, after the response's start
                raise RuntimeError("the connection broke")

        async def receive():
            await asyncio.Event().wait()  # the client never goes: only the failed send may end the stream
            raise AssertionError("unreachable")

        job = admit(svc)
        with pytest.raises(RuntimeError, match="the connection broke"):
            await push_stream(job, SSEWriter(job, "/generate_stream", svc.metrics), [], svc.keepalive_s, receive, send)
        return job, calls

    job, calls = on_server_loop(server, broken_connection)
    assert calls == 2  # nothing was sent after the failure
    assert all(u.ticket.cancelled for u in job.units)


def chat_body(url: str, content: str, **extra) -> dict:
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    return {"model": model, "messages": [{"role": "user", "content": content}], "stream": True, **extra}


def test_a_chat_stream_whose_client_goes_away_stops_its_generation(url, paced):
    paced(0.03)
    body = chat_body(url, "supercalifragilistic", max_tokens=48, lexicon=False)
    before = scrape(url)
    with httpx.Client(timeout=60) as client, client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))  # the role's chunk
        assert next(line for line in lines if line.startswith("data:"))  # a token's: then the client goes away
    assert_generation_stopped(url, before, "/v1/chat/completions")


def test_a_quiet_chat_stream_sends_keep_alive_comments_then_its_answer(server, url, paced):
    paced(0.05)
    body = chat_body(url, "supercalifragilistic", max_tokens=6, lexicon=False)
    whole = httpx.post(url + "/v1/chat/completions", json={**body, "stream": False}, timeout=60).json()
    server.service.keepalive_s = 0.01
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
            lines = [line for line in r.iter_lines() if line]
    finally:
        server.service.keepalive_s = 15.0
    assert ": keep-alive" in lines and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
