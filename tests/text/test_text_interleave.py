"""A long text's words do not hold back the requests queued after them: the scheduler's queue holds one group
per submit (a text's words are one group), and groups take turns to join the batch, a ticket each. The real
default model's engine, paced so the queue is still full when the second request arrives; the test checks the
order in which requests joined the batch, not times."""

from __future__ import annotations

from pathlib import Path

from service_harness import load_engine

from attnserve.service.engine.engine import DecodingOptions
from attnserve.service.engine.scheduler import Failed, Finished, Scheduler
from attnserve.service.metrics import ServiceMetrics

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


def finish(ticket) -> object:
    events = []
    while not any(isinstance(e, Finished | Failed) for e in events):
        events += ticket.next_events_blocking(timeout=30)
    return events[-1]


def test_a_request_queued_after_a_long_text_joins_before_the_texts_last_words():
    engine = load_engine(DEFAULT_BUNDLE, step_delay_s=0.01)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=2, max_concurrent_requests=64, request_timeout_s=60)
    sched.start()
    try:
        options = DecodingOptions(max_new_tokens=12)
        words = ["zyxoplat", "quarbly", "flimbertosh", "snorkelwump", "grumbleton", "wizzlewort"] * 2
        text = sched.submit_many([(engine.encode_text(w), options) for w in words])
        one = sched.submit(engine.encode_text("blorptastic"), options)
        for t in (*text, one):
            assert isinstance(finish(t), Finished)
        order = sorted([*text, one], key=lambda t: t.t_admitted)
        # under first-come-first-served it would join 13th, after all twelve of the text's words
        assert order.index(one) <= 3, [t.t_admitted for t in order]
        assert sched.in_flight == 0 and sched.retry_after_s() >= 1
    finally:
        sched.stop()


def test_a_text_alone_still_joins_the_batch_together():
    engine = load_engine(DEFAULT_BUNDLE)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=8, max_concurrent_requests=64, request_timeout_s=60)
    sched.start()
    try:
        words = ["zyxoplat", "quarbly", "flimbertosh"]
        tickets = sched.submit_many([(engine.encode_text(w), DecodingOptions(max_new_tokens=12)) for w in words])
        for t in tickets:
            assert isinstance(finish(t), Finished)
        assert len({t.t_admitted for t in tickets}) == 1  # one encoder call for the group: they share its steps
    finally:
        sched.stop()
