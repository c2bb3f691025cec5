"""Continuous batching seen from outside: concurrent mixed requests answer as they do alone (fp32 and int8),
a short request passes a long one, and a quiet stream sends keep-alive comments.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from service_harness import scrape, serving, sse_events
from tgi_calls import WORDS, batches_larger_than_one, generate, token_ids


def test_concurrent_mixed_lengths_match_one_by_one_and_batch(url, paced):
    words = WORDS * 2
    one_by_one = [token_ids(generate(url, w)) for w in words]
    paced(0.005)
    before = scrape(url)
    with ThreadPoolExecutor(len(words)) as pool:
        together = list(pool.map(lambda w: token_ids(generate(url, w)), words))
    after = scrape(url)
    assert together == one_by_one
    assert batches_larger_than_one(before, after) > 0


def test_int8_served_by_default_answers_under_load_as_alone(tiny_int8_bundle_dir):
    """The default model serves int8 on CPU: 60 words (dictionary and pseudo-words), greedy and
    seeded sampling, answer exactly as they do alone when sent by 16 concurrent clients."""
    import random

    rng = random.Random(3)
    words = WORDS + ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 12))) for _ in range(50)]
    with serving(tiny_int8_bundle_dir, max_batch_size=16, max_concurrent_requests=64) as server:
        assert server.service.engine.variant == "int8"
        for params in ({}, {"do_sample": True, "seed": 11, "temperature": 1.3}):
            alone = [token_ids(generate(server.url, w, **params)) for w in words]
            server.service.engine.step_delay_s = 0.002
            before = scrape(server.url)
            with ThreadPoolExecutor(16) as pool:
                together = list(pool.map(lambda w, p=params: token_ids(generate(server.url, w, **p)), words))
            server.service.engine.step_delay_s = 0.0
            assert together == alone, params
            assert batches_larger_than_one(before, scrape(server.url)) > 0


def test_short_request_sent_while_a_long_one_runs_finishes_first(url, paced):
    paced(0.03)
    done = {}
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", url + "/generate_stream", json={"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}
        ) as long_stream,
    ):
        events = sse_events(long_stream.iter_lines())
        first = next(e for e in events if e != "keep-alive")
        assert first["generated_text"] is None  # the long request is running

        def short() -> None:
            generate(url, "a", max_new_tokens=1)
            done["short"] = time.perf_counter()

        t = threading.Thread(target=short)
        t.start()
        for e in events:
            if e != "keep-alive" and e["generated_text"] is not None:
                done["long"] = time.perf_counter()
        t.join()
    assert done["short"] < done["long"]


def test_keep_alive_comments_on_a_quiet_stream(server, url, paced):
    paced(0.05)
    server.service.keepalive_s = 0.01
    try:
        with httpx.stream("POST", url + "/generate_stream", json={"inputs": "attention"}, timeout=60) as r:
            lines = list(r.iter_lines())
    finally:
        server.service.keepalive_s = 15.0
    assert ": keep-alive" in lines
    events = [e for e in sse_events(iter(lines)) if e != "keep-alive"]
    assert events[-1]["generated_text"] == generate(url, "attention")["generated_text"]
