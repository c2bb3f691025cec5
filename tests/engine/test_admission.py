"""Admission into a saturated batch: while more requests wait than rows are free, an encoder call that a free row
opens takes a quarter batch of waiting requests, and those past the free rows join, already encoded, as rows free
up. The real default model's engine; the test counts the requests of each encoder call, not times."""

from __future__ import annotations

import collections
import dataclasses
import json
import time
from pathlib import Path

from service_harness import load_engine

from attnserve.service.engine import waiting
from attnserve.service.engine.engine import DecodingOptions, GenerationResult
from attnserve.service.engine.scheduler import QUEUE_SCAN_S, Failed, Finished, Scheduler, Ticket
from attnserve.service.engine.slots import SlotBatch
from attnserve.service.metrics import ServiceMetrics

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"
# made-up words of different lengths, so rows finish at different steps
WORDS = ["zyx", "quarbly", "flimbertoshing", "snork", "grumbletonian", "wiz", "blorptastic", "mip", "trandleworth"] * 5


def run_all(sched: Scheduler, requests: list, separately: bool = False) -> list:
    """Start the scheduler, queue every request at once (one group, as one text's words; `separately`: one request
    per submit, as many clients' words), wait until each has finished (and not failed), stop it."""
    sched.start()
    try:
        tickets = [sched.submit(*r) for r in requests] if separately else sched.submit_many(requests)
        for t in tickets:
            events = []
            while not any(isinstance(e, Finished | Failed) for e in events):
                events += t.next_events_blocking(timeout=30)
            assert isinstance(events[-1], Finished)
    finally:
        sched.stop()
    return tickets


def join_groups(join_group: int | None) -> list[int]:
    """How many requests each encoder call took, in order, for WORDS queued at once."""
    engine = load_engine(DEFAULT_BUNDLE)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=8, max_concurrent_requests=64, request_timeout_s=60)
    if join_group is not None:
        sched.join_group = join_group
    options = DecodingOptions(max_new_tokens=16)
    tickets = run_all(sched, [(engine.encode_text(w), options) for w in WORDS])
    by_start = collections.Counter(t.t_admitted for t in tickets)
    return [by_start[k] for k in sorted(by_start)]


def test_a_saturated_batch_encodes_a_quarter_batch_of_waiting_requests_per_call():
    groups = join_groups(None)  # the default: max_batch_size // 4 = 2
    assert sum(groups) == len(WORDS) and groups[0] == 8
    # only the queue's last request may join alone: before it, more waited than were free
    assert min(groups[:-1]) >= 2, groups
    # encoding only what fits, single requests are encoded while others wait
    every_step = join_groups(1)
    assert min(every_step[:-1]) == 1, every_step
    assert len(every_step) > len(groups)


def encoded_ahead(sched: Scheduler, timeout_s: float = 30.0) -> list:
    """The tickets waiting encoded in `sched`, once there are some (the engine thread fills them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with sched._cv:
            waiting = [t for t, _, _ in list(sched._encoded)]
        if waiting:
            return waiting
        time.sleep(0.002)
    raise AssertionError("nothing was encoded ahead")


def test_requests_encoded_ahead_leave_when_cancelled_and_fail_at_shutdown():
    engine = load_engine(DEFAULT_BUNDLE, step_delay_s=0.02)  # paced: the stock stays while the test looks at it
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=8, max_concurrent_requests=64, request_timeout_s=60)
    sched.start()
    try:
        options = DecodingOptions(max_new_tokens=16)
        tickets = sched.submit_many([(engine.encode_text(w), options) for w in WORDS])
        cancelled = encoded_ahead(sched)
        for t in cancelled:
            t.cancel()
        for t in tickets:
            if t not in cancelled:
                events = []
                while not any(isinstance(e, Finished | Failed) for e in events):
                    events += t.next_events_blocking(timeout=30)
                assert isinstance(events[-1], Finished)
        for t in cancelled:  # they left at the next step boundary (before their first step, unless the test was slow)
            assert t.done and not any(isinstance(e, Finished | Failed) for e in t.take_events())
        assert sched.in_flight == 0 and not sched._encoded
        # a stop with requests encoded ahead fails them as it fails the queued and the running
        later = sched.submit_many([(engine.encode_text(w), options) for w in WORDS])
        stranded = encoded_ahead(sched)
    finally:
        sched.stop()
    for t in stranded:
        events = t.take_events()
        assert events and isinstance(events[-1], Failed), events
    assert all(t.done for t in later)


def test_answers_queued_behind_a_saturated_batch_of_the_served_variant_are_the_answers_alone(monkeypatch):
    """The variant the default model serves on CPU (bundle.json default_variant), greedy, with a seed and by beam
    search: requests encoded ahead, rows that joined into free slots and rows moved down by compaction give each
    word's answer alone. Each encoder call takes at most a quarter batch beyond the rows it fills, even where a beam
    search at the queue's head does not fit and single rows behind it would."""
    engine = load_engine(DEFAULT_BUNDLE)
    served = json.loads((DEFAULT_BUNDLE / "bundle.json").read_text())["default_variant"]["cpu"]
    assert engine.variant == served and isinstance(engine.new_batch(), SlotBatch)
    seeded = DecodingOptions(max_new_tokens=16, do_sample=True, temperature=0.9, top_p=0.95)
    modes = [DecodingOptions(max_new_tokens=16), seeded, DecodingOptions(max_new_tokens=16, num_beams=4)]
    jobs = [(w, modes[i % 3] if i % 3 != 1 else dataclasses.replace(seeded, seed=i)) for i, w in enumerate(WORDS)]
    alone = [engine.generate([w], o)[0] for w, o in jobs]
    for separately in (False, True):  # one group (compaction runs as the batch drains); many: calls chosen by length
        calls, order, compactions = [], [], []
        record_calls(monkeypatch, calls, order, compactions)
        sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=8, max_concurrent_requests=64, request_timeout_s=60)
        tickets = run_all(sched, [(engine.encode_text(w), o) for w, o in jobs], separately)
        monkeypatch.undo()
        assert any(ahead for _, ahead in calls)
        assert all(ahead == 0 or joining + ahead <= sched.join_group for joining, ahead in calls), calls
        if separately:
            assert order != tickets  # some encoder call took a request out of turn, by its length
        else:
            assert compactions
        for (w, o), t, ref in zip(jobs, tickets, alone):
            got = GenerationResult.of(t.generation)
            assert got.token_ids == ref.token_ids, (w, o, separately)
            assert [h.token_ids for h in got.hypotheses] == [h.token_ids for h in ref.hypotheses], (w, o, separately)


def record_calls(monkeypatch, calls: list, order: list, compactions: list) -> None:
    """Record each encoder call's (joining, ahead) counts in `calls`, its tickets in `order`, and the free slots
    of each compaction in `compactions`."""
    start, compact = Scheduler._start, SlotBatch._compact

    def counting_start(self, batch, joining, ahead, touched):
        calls.append((len(joining), len(ahead)))
        order.extend(joining + ahead)
        return start(self, batch, joining, ahead, touched)

    def counting_compact(self):
        compactions.append(self.n - self.n_live)
        return compact(self)

    monkeypatch.setattr(Scheduler, "_start", counting_start)
    monkeypatch.setattr(SlotBatch, "_compact", counting_compact)


def ticket(length: int) -> Ticket:
    """A queued request of a source `length` tokens long (what `pick_call` reads of it)."""
    return Ticket([5] * length, DecodingOptions(max_new_tokens=4), deadline=time.perf_counter() + 60, loop=None)


def test_a_deep_queue_encodes_the_next_request_with_those_of_nearest_length_within_the_window():
    """`pick_call`: the queue's head always goes; the others come from the next CALL_WINDOW x size tickets in turn,
    nearest the head's length and not longer first; a group's tickets go in their order; the groups passed over
    keep their places at the front, a group that gave a ticket moves to the back; cancelled requests stay."""
    singles = [ticket(n) for n in (6, 9, 2, 6, 5, 7, 6, 4)]
    text = [ticket(n) for n in (6, 6, 3)]  # one text's words: one group
    singles[3].cancel()
    queue = collections.deque(collections.deque([t]) for t in singles[:5])
    queue.append(collections.deque(text))
    queue.extend(collections.deque([t]) for t in singles[5:])
    assert waiting.CALL_WINDOW * 4 == 8  # the window: the next 8 tickets in turn, of the first 8 groups
    call = waiting.pick_call(queue, 4, time.perf_counter())
    # head (6); the other 6s, but not the cancelled one; then 5 (shorter before longer): in turn order
    assert call == [singles[0], singles[4], text[0], singles[6]], [len(t.source_ids) for t in call]
    # passed over, in their places; then the text, its first word taken, at the back
    assert [list(g) for g in queue] == [[singles[1]], [singles[2]], [singles[3]], [singles[5]], [singles[7]], text[1:]]


def test_a_request_passed_over_for_its_length_twice_goes_with_the_next_call():
    tickets = [ticket(n) for n in (6, 6, 13, 6, 6, 6, 6, 6)]
    queue = collections.deque(collections.deque([t]) for t in tickets)
    first = waiting.pick_call(queue, 2, time.perf_counter())  # the window: the first four; the 13 is passed over
    assert first == tickets[:2] and tickets[2].passed_over == 1 and tickets[3].passed_over == 1
    tickets[2].passed_over = waiting.PASSED_OVER - 1  # as if passed over by as many calls less one
    second = waiting.pick_call(queue, 2, time.perf_counter())  # head: the 13 itself
    assert second == [tickets[2], tickets[3]]
    tickets[5].passed_over = waiting.PASSED_OVER  # behind the head, far from its length: goes all the same
    tickets[5].source_ids = tickets[6].source_ids = [5] * 13
    third = waiting.pick_call(queue, 2, time.perf_counter())  # window: 6 (head), 13 (passed over enough), 13, 6
    assert third == [tickets[4], tickets[5]]


def test_a_full_batch_s_queue_loses_its_expired_requests_at_the_next_look_through_it():
    """Requests that wait behind a full batch past their deadline end with a timeout at the next look through the
    whole queue, which comes at most every QUEUE_SCAN_S, not at every step: between looks, nothing is read."""
    sched = Scheduler(load_engine(DEFAULT_BUNDLE), ServiceMetrics("t"), max_batch_size=2, request_timeout_s=60)
    late, later = ticket(5), ticket(6)
    sched._waiting.extend(collections.deque([t]) for t in (late, later))
    sched._n_waiting = sched._in_flight = 2
    now = time.perf_counter()
    late.deadline = now - 1
    touched: list[Ticket] = []
    assert sched._take_waiting(2, now, touched) == ([], [])  # the batch is full: nobody joins
    assert touched == [late] and late.done and late._events[-1].error.error_type == "timeout"
    assert sched._n_waiting == 1 and sched._in_flight == 1
    later.deadline = now  # past it by the next step, but the queue was read just now
    touched = []
    sched._take_waiting(2, now + QUEUE_SCAN_S / 2, touched)
    assert touched == [] and not later.done
    sched._take_waiting(2, now + QUEUE_SCAN_S, touched)
    assert touched == [later] and later.done and sched._n_waiting == 0
