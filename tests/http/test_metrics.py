"""/metrics counts a known set of requests exactly."""

from __future__ import annotations

import json

import httpx
from service_harness import metric, scrape, serving, stream
from tgi_calls import generate


def test_metrics_counts_match_a_known_set_of_requests(tiny_bundle_dir):
    with serving(tiny_bundle_dir) as s:
        url = s.url
        answers = [generate(url, w) for w in ("cat", "hello", "attention")]
        status, events = stream(url + "/generate_stream", {"inputs": "zebra"})
        assert status == 200
        compat = httpx.post(url + "/", json={"inputs": "data"}, timeout=30)
        assert compat.status_code == 200
        for body in ({"inputs": ""}, {"inputs": "cat", "parameters": {"top_p": 2}}):
            assert httpx.post(url + "/generate", json=body, timeout=30).status_code == 422
        httpx.get(url + "/health", timeout=30)

        m = scrape(url)
        assert metric(m, "attnserve_requests_total", route="/generate", outcome="success") == 3
        assert metric(m, "attnserve_requests_total", route="/generate", outcome="validation") == 2
        assert metric(m, "attnserve_requests_total", route="/generate_stream", outcome="success") == 1
        assert metric(m, "attnserve_requests_total", route="/", outcome="success") == 1
        assert metric(m, "attnserve_requests_total") == 7
        assert metric(m, "attnserve_request_duration_seconds_count") == 5
        for name in ("queue_duration", "time_to_first_token", "inference_duration"):
            key = "attnserve_request_" + name if name == "queue_duration" else "attnserve_" + name
            assert metric(m, key + "_seconds_count") == 5, name
        assert metric(m, "attnserve_request_input_tokens_count") == 5
        assert metric(m, "attnserve_request_input_tokens_sum") == sum(
            len(w) for w in ("cat", "hello", "attention", "zebra", "data")
        )
        n_tokens = (
            sum(a["details"]["generated_tokens"] for a in answers) + len(events) + int(compat.headers["x-generated-tokens"])
        )
        n_tokens += int(httpx.post(url + "/generate", json={"inputs": "data"}, timeout=30).headers["x-generated-tokens"])
        m = scrape(url)
        assert metric(m, "attnserve_generated_tokens_total") == n_tokens
        assert metric(m, "attnserve_request_generated_tokens_sum") == n_tokens
        assert metric(m, "attnserve_inter_token_latency_seconds_count") == n_tokens - 6  # every token after a first
        assert metric(m, "attnserve_batch_size_sum") == n_tokens  # one row per step: requests came one at a time
        assert metric(m, "attnserve_decoder_step_duration_seconds_count") == n_tokens
        assert metric(m, "attnserve_encoder_duration_seconds_count") == 6
        assert metric(m, "attnserve_queue_size") == 0 and metric(m, "attnserve_running_sequences") == 0
        model_id = json.loads((tiny_bundle_dir / "bundle.json").read_text())["model_id"]
        assert all(dict(labels).get("model") == model_id for (name, labels) in m if name.startswith("attnserve_"))


def test_observe_counted_writes_what_as_many_observes_write():
    from prometheus_client import CollectorRegistry, generate_latest

    from attnserve.service.metrics import LATENCY_BUCKETS, ServiceMetrics, observe_counted

    one_by_one, at_once = ServiceMetrics("m", CollectorRegistry()), ServiceMetrics("m", CollectorRegistry())
    # values a binary fraction, so that n times the value is the sum of n of them exactly; on, between and past bounds
    for value, count in [(0.0005, 3), (0.0009765625, 7), (0.25, 1), (0.0, 2), (1024.0, 4), (0.0078125, 0)]:
        for _ in range(count):
            one_by_one.inter_token_latency.observe(value)
        observe_counted(at_once.inter_token_latency, [(value, count)])

    def lines(metrics: ServiceMetrics) -> list[bytes]:  # each registry's creation times aside
        return [line for line in generate_latest(metrics.registry).splitlines() if b"_created" not in line]

    assert lines(at_once) == lines(one_by_one)
    assert len(LATENCY_BUCKETS) > 10 and b'attnserve_inter_token_latency_seconds_count{model="m"} 17.0' in lines(at_once)


def test_observe_counted_of_a_steps_values_writes_what_an_observe_per_value_writes():
    from prometheus_client import CollectorRegistry, generate_latest

    from attnserve.service.metrics import ServiceMetrics, observe_counted

    one_by_one, together = ServiceMetrics("m", CollectorRegistry()), ServiceMetrics("m", CollectorRegistry())
    # binary fractions (their sums are exact in any order): on, between and past the bounds; a step's requests, then
    # a step without any, then another
    steps = [[0.0005, 0.25, 0.0009765625, 0.0005, 1024.0], [], [0.0, 3.0, 0.0078125]]
    for values in steps:
        for v in values:
            one_by_one.time_to_first_token.observe(v)
            one_by_one.generated_tokens.observe(v)
        observe_counted(together.time_to_first_token, [(v, 1) for v in values])
        observe_counted(together.generated_tokens, [(v, 1) for v in values])

    def lines(metrics: ServiceMetrics) -> list[bytes]:
        return [line for line in generate_latest(metrics.registry).splitlines() if b"_created" not in line]

    assert lines(together) == lines(one_by_one)
    assert b'attnserve_time_to_first_token_seconds_count{model="m"} 8.0' in lines(together)
