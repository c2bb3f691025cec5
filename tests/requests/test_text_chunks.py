"""A text of more words that need the model than `max_concurrent_requests` is admitted in chunks, not refused: at
most `Scheduler.text_chunk` of its words count toward the bound at once, the rest wait uncounted for their turn.
Its answer is whole and in text order, streamed or not; other requests still get in while it runs; a text is
refused (429) only when the bound has no room for its first word. Real engine (the tiny fixture bundle, a
word-level bundle without a lexicon, so every word goes to the model), real uvicorn on 127.0.0.1; no timings."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from service_harness import load_engine, serving, stream

from attnserve.service.engine.engine import DecodingOptions
from attnserve.service.engine.scheduler import Failed, Finished, Scheduler
from attnserve.service.metrics import ServiceMetrics

WORDS = ["cat", "dog", "bird", "fish", "tree", "house", "river", "stone", "cloud", "apple", "green", "paper"]
TEXT = " ".join(WORDS)


def finish(ticket) -> object:
    events = []
    while not any(isinstance(e, Finished | Failed) for e in events):
        events += ticket.next_events_blocking(timeout=30)
    return events[-1]


def test_a_text_of_more_unknown_words_than_the_bound_is_answered_whole_and_in_order(tiny_bundle_dir):
    # max_concurrent_requests=4: a text counts at most 2 words at once (half the bound), 12 in all
    with serving(tiny_bundle_dir, step_delay_s=0.005, max_batch_size=2, max_concurrent_requests=4) as s:
        with httpx.Client(timeout=60) as c:
            alone = [c.post(s.url + "/generate", json={"inputs": w}).json()["generated_text"] for w in WORDS]
            r = c.post(s.url + "/generate", json={"inputs": TEXT, "parameters": {"details": True}})
            assert r.status_code == 200, r.text
            body = r.json()
            words = body["details"]["words"]
            assert [w["word"] for w in words] == WORDS
            assert [TEXT[w["start"] : w["end"]] for w in words] == WORDS
            assert [w["text"] for w in words] == alone  # each word's own answer, in the text's order
            assert body["generated_text"] == " | ".join(alone)
            assert all(w["source"] == "model" for w in words)

            status, events = stream(s.url + "/generate_stream", {"inputs": TEXT}, c)
            assert status == 200 and events[-1]["generated_text"] == body["generated_text"]
            assert "".join(e["token"]["text"] for e in events if not e["token"]["special"]) == "".join(
                t["text"] for t in body["details"]["tokens"] if not t["special"]
            )
            # every slot of the bound came back
            assert c.get(s.url + "/metrics").status_code == 200
    assert s.service.scheduler.in_flight == 0


def test_a_one_word_request_sent_while_a_long_text_runs_is_answered(tiny_bundle_dir):
    long_text = " ".join(WORDS * 4)  # 48 words, 2 counted at once
    with serving(tiny_bundle_dir, step_delay_s=0.01, max_batch_size=2, max_concurrent_requests=4) as s:
        with httpx.Client(timeout=60) as c:
            expected = c.post(s.url + "/generate", json={"inputs": "lamp"}).json()["generated_text"]
            whole = c.post(s.url + "/generate", json={"inputs": long_text}).json()["generated_text"]
            got: dict[str, object] = {}

            def read_text() -> None:
                got["text"] = stream(s.url + "/generate_stream", {"inputs": long_text}, httpx.Client(timeout=60))

            reader = threading.Thread(target=read_text)
            reader.start()
            deadline = time.monotonic() + 30
            while s.service.scheduler.in_flight == 0 and time.monotonic() < deadline:  # the text is in flight
                time.sleep(0.002)
            one = c.post(s.url + "/generate", json={"inputs": "lamp"})
            reader.join(60)
            assert one.status_code == 200 and one.json()["generated_text"] == expected
            status, events = got["text"]
            assert status == 200 and events[-1]["generated_text"] == whole


def test_the_scheduler_counts_a_texts_words_a_chunk_at_a_time(tiny_bundle_dir):
    engine = load_engine(tiny_bundle_dir, step_delay_s=0.005)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=2, max_concurrent_requests=4, request_timeout_s=60)
    sched.start()
    try:
        assert sched.text_chunk == 2
        options = DecodingOptions(max_new_tokens=8)
        tickets = sched.submit_many([(engine.encode_text(w), options) for w in WORDS], chunk=sched.text_chunk)
        assert len(tickets) == len(WORDS) and sched.in_flight <= 2
        assert sum(t.counted for t in tickets) <= 2  # the others wait uncounted
        one = sched.submit(engine.encode_text("lamp"), options)  # room is left for other requests
        for t in (*tickets, one):
            assert isinstance(finish(t), Finished)
        assert all(t.counted for t in tickets) and sched.in_flight == 0
    finally:
        sched.stop()


def test_a_text_is_refused_only_when_the_bound_has_no_room_for_its_first_word(tiny_bundle_dir):
    engine = load_engine(tiny_bundle_dir, step_delay_s=0.02)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=1, max_concurrent_requests=2, request_timeout_s=60)
    sched.start()
    try:
        options = DecodingOptions(max_new_tokens=48)
        ids = engine.encode_text("supercalifragilistic")
        first = sched.submit(ids, options)
        text = sched.submit_many([(engine.encode_text(w), options) for w in WORDS[:5]], chunk=sched.text_chunk)
        assert sched.in_flight == 2  # one of the text's words, the bound's last slot
        with pytest.raises(Exception) as refused:  # full: the next text's first word has no room
            sched.submit_many([(engine.encode_text(w), options) for w in WORDS[:3]], chunk=sched.text_chunk)
        assert refused.value.error_type == "overloaded" and refused.value.retry_after_s >= 1
        for t in text:
            t.cancel()  # its waiting words end too, and give back nothing they did not hold
        assert isinstance(finish(first), Finished)
        deadline = time.monotonic() + 10
        while sched.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.in_flight == 0 and all(t.done for t in text)
    finally:
        sched.stop()


def test_waiting_words_fail_as_unavailable_when_the_server_stops(tiny_bundle_dir):
    engine = load_engine(tiny_bundle_dir, step_delay_s=0.02)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=1, max_concurrent_requests=2, request_timeout_s=60)
    sched.start()
    options = DecodingOptions(max_new_tokens=48)
    text = sched.submit_many([(engine.encode_text(w), options) for w in WORDS[:4]], chunk=sched.text_chunk)
    sched.stop()
    last = [finish(t) for t in text]
    assert all(isinstance(e, Failed | Finished) for e in last) and any(isinstance(e, Failed) for e in last)
    assert isinstance(last[-1], Failed) and last[-1].error.error_type == "unavailable"
