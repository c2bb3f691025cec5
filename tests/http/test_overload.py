"""Servers of their own under pressure: a burst past the bound gets 429 with Retry-After, a timeout 504, a dead
engine loop a 503 on /health.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from service_harness import metric, scrape, serving, stream


def test_overload_burst_gets_only_200_and_429_with_retry_after_then_recovers(tiny_bundle_dir):
    with serving(tiny_bundle_dir, step_delay_s=0.02, max_batch_size=2, max_concurrent_requests=3) as s:

        def call(_: int) -> httpx.Response:
            return httpx.post(s.url + "/generate", json={"inputs": "transformer"}, timeout=60)

        with ThreadPoolExecutor(24) as pool:
            responses = list(pool.map(call, range(24)))
        statuses = [r.status_code for r in responses]
        assert set(statuses) == {200, 429}, statuses
        for r in responses:
            if r.status_code == 429:
                assert r.headers["retry-after"].isdigit() and int(r.headers["retry-after"]) >= 1
                assert r.json()["error_type"] == "overloaded"
        assert httpx.get(s.url + "/ready", timeout=30).status_code == 200
        assert call(0).status_code == 200
        samples = scrape(s.url)
        assert metric(samples, "attnserve_requests_total", outcome="overloaded") == statuses.count(429)


def test_timeout_answers_504_and_frees_the_slot(tiny_bundle_dir):
    with serving(tiny_bundle_dir, step_delay_s=0.1, max_batch_size=1, max_concurrent_requests=2, request_timeout_s=0.35) as s:
        r = httpx.post(s.url + "/generate", json={"inputs": "supercalifragilistic"}, timeout=60)
        assert r.status_code == 504 and r.json()["error_type"] == "timeout"
        assert s.service.scheduler.in_flight == 0
        status, events = stream(s.url + "/generate_stream", {"inputs": "supercalifragilistic"})
        assert status == 200 and events[-1]["error_type"] == "timeout"  # headers were sent: the error is the last event
        s.service.engine.step_delay_s = 0.0
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=60).status_code == 200
        samples = scrape(s.url)
        assert metric(samples, "attnserve_requests_total", outcome="timeout") == 2
        assert metric(samples, "attnserve_running_sequences") == 0


def test_health_answers_503_when_the_engine_loop_stops(tiny_bundle_dir):
    with serving(tiny_bundle_dir) as s:
        assert httpx.get(s.url + "/health", timeout=30).status_code == 200
        s.service.engine.fail = True
        r = httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30)
        assert r.status_code == 503 and r.json()["error_type"] == "unavailable"
        assert "stopped" in r.json()["error"] and "injected" not in r.json()["error"]
        h = httpx.get(s.url + "/health", timeout=30)
        assert h.status_code == 503 and h.json()["error_type"] == "unavailable"
        assert httpx.get(s.url + "/ready", timeout=30).status_code == 503
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 503
