"""A client that goes away mid-request (streaming or not) stops its generation."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from service_harness import assert_generation_stopped, metric, scrape, sse_events


def test_client_disconnect_mid_stream_stops_generation(url, paced):
    paced(0.03)
    before = scrape(url)
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", url + "/generate_stream", json={"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}
        ) as r,
    ):
        events = sse_events(r.iter_lines())
        next(events), next(events)  # two tokens in, then the client goes away
    assert_generation_stopped(url, before, "/generate_stream")


def test_client_disconnect_without_streaming_cancels_too(url, paced):
    paced(0.03)
    before = scrape(url)
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.1)  # running now
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = scrape(url)
        if metric(after, "attnserve_requests_total", route="/generate", outcome="cancelled") > metric(
            before, "attnserve_requests_total", route="/generate", outcome="cancelled"
        ):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the disconnected request was not cancelled")
    deadline = time.monotonic() + 5  # the row leaves at the next step boundary
    while metric(scrape(url), "attnserve_running_sequences") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert metric(scrape(url), "attnserve_running_sequences") == 0
