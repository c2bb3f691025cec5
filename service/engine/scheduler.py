"""Continuous (iteration-level) batching over the engine's primitives.

One engine thread owns the engine and its running batch; nothing else touches
ONNX Runtime. Each turn of its loop is one step boundary:

    1. rows whose client went away or whose deadline passed leave the batch;
    2. waiting requests join, up to `max_batch_size` rows: ONE encoder call
       for the whole group (`engine.start`), then `batch.add` pads them into
       the running cache. When half a batch or more waits, that call also
       encodes requests ahead, up to a quarter batch in all, chosen by source
       length near the queue's head (service/engine/waiting.py: less padding);
       they join, already encoded, at the next boundaries with room (`_encoded`);
    3. ONE decoder call for every row (`engine.step`); each row's token goes
       to its request, and rows that finished leave at once (`batch.remove`),
       so a short request is never held by a long one.
    4. scoring requests (`submit_scores`: teacher forcing, service/engine/scoring.py)
       take the same boundary in a batch of their own: they leave, join (a row
       per target) and run ONE decoder call over their given tokens.

Requests are `Ticket`s (service/engine/tickets.py). The event loop (HTTP handlers) or any thread (the
in-process API) submits them; the engine thread appends events to a ticket
and wakes its owner, once per step for all tickets of one event loop.
Admission is bounded: queued + running requests never exceed
`max_concurrent_requests`; past it `submit` raises `Overloaded` with a retry
time. A long text's words are admitted in chunks (`submit_many(chunk=...)`):
those past its chunk wait uncounted and join the bound as its earlier words
finish, so a text is refused only when the bound has no room for its first
word. Failures are engine outcomes (service/errors.py): `submit` raises them,
and a ticket that ends with one gets it as its `Failed` event; only the HTTP
layer turns them into status codes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

from attnserve.service.engine.engine import DecodingOptions, Engine, Generation, InputError, StepResult
from attnserve.service.engine.runtime import ENGINE_THREAD_OS_NAME, name_os_thread
from attnserve.service.engine.scoring import ForcedBatch
from attnserve.service.engine.tickets import Failed, Finished, ScoreTicket, TextShare, Ticket
from attnserve.service.engine.waiting import pick_call
from attnserve.service.errors import InvalidRequest, Overloaded, TimedOut, Unavailable, retry_after_s
from attnserve.service.metrics import ServiceMetrics, StepObservations, observe_counted

# the tickets and their events live in service/engine/tickets.py; named here too, where the owners import them
__all__ = ["Failed", "Finished", "Scheduler", "ScoreTicket", "TextShare", "Ticket", "check_rows"]

log = logging.getLogger("attnserve.scheduler")


# how often the whole queue is read for requests past their deadline or cancelled (one that reaches the batch is
# checked as it joins)
QUEUE_SCAN_S = 0.01


def check_rows(options: DecodingOptions, max_batch_size: int) -> None:
    """InvalidRequest when a request needs more batch rows (beams, best_of samples) than a batch holds: it could
    never join. The one check of rows against the batch size: the one validator (service/requests/validation.py
    `Limits.rows`, which every front end's requests meet) calls it, and `Scheduler.submit_many` keeps it as its
    own invariant for options made without the validator."""
    if options.n_rows > max_batch_size:
        raise InvalidRequest(
            f"this request needs {options.n_rows} batch rows (best_of/num_beams); "
            f"the server's max_batch_size is {max_batch_size}",
            field="parameters",
        )


class Scheduler:
    """Owns the engine thread. Thread-safe `submit`; `start`/`stop` from the owner."""

    def __init__(
        self,
        engine: Engine,
        metrics: ServiceMetrics,
        max_batch_size: int = 32,
        max_concurrent_requests: int = 128,
        request_timeout_s: float = 60.0,
        stream_interval_s: float = 0.0,
    ):
        self.engine = engine
        self.metrics = metrics
        self.max_batch_size = max_batch_size
        self.max_concurrent_requests = max_concurrent_requests
        self.request_timeout_s = request_timeout_s
        # A streaming owner is woken for its first token, its last, and between them at most once per this
        # interval (0: every token); the tokens in between wait in its ticket and are read together. Each wake
        # costs the shared core a pipe write, a thread switch and an event-loop turn, about 0.14 ms a token at a
        # 0.3 ms step (benchmarks/HISTORY.md, "Stream interval: one wake-up per token, or fewer").
        self.stream_interval_s = stream_interval_s
        self._cv = threading.Condition()
        # queued requests, one group per submit (a text's words are one group); groups take turns to join the batch,
        # one ticket each, so a one-word request queued behind a long text's words joins at the next free row
        self._waiting: collections.deque[collections.deque[Ticket]] = collections.deque()
        self._n_waiting = 0
        # long texts' words that wait uncounted for their text's next chunk (`submit_many(chunk=...)`), in turn order
        self._shares: collections.deque[TextShare] = collections.deque()
        # scoring requests (teacher forcing) wait apart and step in a batch of their own, after the generation step
        self._scoring: collections.deque[ScoreTicket] = collections.deque()
        self._by_gen: dict[int, Ticket] = {}  # id(engine Generation) -> its ticket: the running requests
        self._in_flight = 0  # submitted and not yet finished: the admission bound counts these
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.failure: str | None = None  # why the engine loop died, if it did
        self._mean_request_s = 1.0  # moving average, for Retry-After
        # Requests encoded ahead of a free row: when half a batch or more waits, one encoder call takes at least
        # `join_group` of them (a quarter batch) instead of the two to four rows that free up at a step; those
        # past the free rows wait here, encoded, and join at the next step boundaries with room. The encoder call's
        # fixed cost is spread over more rows, and no row of the batch waits for a group to gather.
        self._encoded: collections.deque[tuple[Ticket, Generation, object]] = collections.deque()
        self.join_group = max(1, max_batch_size // 4)
        self._steps = StepObservations(metrics)  # the decode steps' metrics, observed together (service/metrics.py)
        self._running = -1  # attnserve_running_sequences as last set
        self._next_queue_scan = 0.0  # perf_counter() time of the next look through the whole queue for expired requests

    # ---- owner side ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="attnserve-engine", daemon=True)
        self._thread.start()

    def stop(self, reason: str = "the server is shutting down") -> None:
        """Stop the engine loop after its current step; requests still in flight fail as Unavailable."""
        with self._cv:
            self._stopping = True
            self._stop_reason = reason
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def saturated(self) -> bool:
        return self._in_flight >= self.max_concurrent_requests

    def retry_after_s(self) -> int:
        """Seconds a refused client should wait: about how long the queue ahead needs to turn over once."""
        return retry_after_s(self._mean_request_s, self._n_waiting / self.max_batch_size)

    def submit(self, source_ids: list[int], options: DecodingOptions, loop: asyncio.AbstractEventLoop | None = None) -> Ticket:
        """Queue a request; raises Overloaded (bound reached), Unavailable (stopping / engine dead), or
        InvalidRequest when it needs more batch rows (beams, best_of samples) than the batch holds: it could never join."""
        return self.submit_many([(source_ids, options)], loop)[0]

    @property
    def text_chunk(self) -> int:
        """How many of one text's words count toward `max_concurrent_requests` at once (`submit_many(chunk=...)`): a
        batch's worth, and at most half the bound, so a long text fills the batch and leaves room for other requests."""
        return max(1, min(self.max_batch_size, self.max_concurrent_requests // 2))

    def submit_many(
        self,
        requests: list[tuple[list[int], DecodingOptions]],
        loop: asyncio.AbstractEventLoop | None = None,
        ready: asyncio.Event | None = None,
        chunk: int | None = None,
    ) -> list[Ticket]:
        """Queue several requests at once (the words of one text), all or none: each counts toward
        `max_concurrent_requests`, and they are queued together, so they join the batch at the same step
        boundary (as far as `max_batch_size` allows) and share its decoder steps. They are one group of the
        queue: while other requests wait, the groups take turns, a ticket each, so a long text does not hold
        back the requests queued after it. Errors as `submit`.
        `ready` (asyncio owners that read every answer whole): the one event all the tickets set, and only
        when one of them ends; None: each ticket sets its own at every step that gives it events.
        `chunk` (a long text): not all or none, but in chunks: the first `chunk` tickets, or as many as the bound has
        room for, are queued now (Overloaded only when it has no room at all), and the rest wait uncounted in a
        `TextShare`; the engine thread queues the next as each counted one finishes, at most `chunk` at once."""
        for _, options in requests:
            check_rows(options, self.max_batch_size)
        deadline = time.perf_counter() + self.request_timeout_s
        tickets = [Ticket(ids, options, deadline, loop, ready) for ids, options in requests]
        with self._cv:
            if self._stopping or not self.alive:
                raise Unavailable(self.unavailable_reason())
            room = self.max_concurrent_requests - self._in_flight
            if chunk is None or len(tickets) <= 1:
                if len(tickets) > room:
                    raise Overloaded(self.retry_after_s())
                now = tickets
            else:
                if room < 1:
                    raise Overloaded(self.retry_after_s())
                n = min(len(tickets), max(1, chunk), room)
                now = tickets[:n]
                if n < len(tickets):
                    share = TextShare(tickets[n:], max(1, chunk))
                    share.active = n
                    for t in tickets:
                        t.share = share
                    for t in share.held:
                        t.counted = False
                    self._shares.append(share)
            self._in_flight += len(now)
            if now:
                self._waiting.append(collections.deque(now))
                self._n_waiting += len(now)
            self.metrics.queue_size.set(self._n_waiting)
            self._cv.notify()
        return tickets

    def submit_scores(
        self,
        source_ids: list[int],
        targets: list[list[int]],
        loop: asyncio.AbstractEventLoop | None = None,
        top_n_tokens: int = 0,
    ) -> ScoreTicket:
        """Queue a scoring request (a row per target); errors as `submit`: InvalidRequest when it has more targets
        than a batch holds."""
        if len(targets) > self.max_batch_size:
            raise InvalidRequest(
                f"{len(targets)} targets; the server scores at most max_batch_size={self.max_batch_size} per request",
                field="targets",
            )
        ticket = ScoreTicket(source_ids, targets, time.perf_counter() + self.request_timeout_s, loop, top_n_tokens)
        with self._cv:
            if self._stopping or not self.alive:
                raise Unavailable(self.unavailable_reason())
            if self._in_flight + 1 > self.max_concurrent_requests:
                raise Overloaded(self.retry_after_s())
            self._in_flight += 1
            self._scoring.append(ticket)
            self._cv.notify()
        return ticket

    def unavailable_reason(self) -> str:
        """Why requests are refused as Unavailable once the engine loop has stopped (or is stopping): what a client may read."""
        if self.failure:  # the cause is in the log; clients get no internals
            return "the generation engine has stopped after an internal error; the server needs a restart"
        return "the server is shutting down"

    # ---- engine thread ------------------------------------------------------------------
    def _run(self) -> None:
        name_os_thread(ENGINE_THREAD_OS_NAME)
        batch = self.engine.new_batch()
        forced = ForcedBatch(self.engine)
        try:
            while True:
                with self._cv:
                    while (
                        not self._stopping
                        and not self._waiting
                        and not self._shares
                        and not len(batch)
                        and not self._encoded
                        and not self._scoring
                        and not len(forced)
                    ):
                        self._cv.wait()
                    if self._stopping:
                        break
                self._turn(batch)
                if self._scoring or len(forced):
                    self._score_turn(forced)
        except Exception as exc:  # the loop must not die silently: /health reports it
            log.exception("engine loop failed")
            self.failure = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            with self._cv:
                self._stopping = True
                reason = getattr(self, "_stop_reason", None) if self.failure is None else self.unavailable_reason()
                leftovers = [t for group in self._waiting for t in group] + [t for t in self._by_gen.values()]
                leftovers += [t for t, _, _ in self._encoded]
                self._encoded.clear()
                leftovers += list(self._scoring) + forced.jobs + [t for share in self._shares for t in share.held]
                self._waiting.clear()
                self._shares.clear()
                self._n_waiting = 0
                self._scoring.clear()
            err = Unavailable(reason or "the server is shutting down")
            for t in leftovers:
                self._finish(t, Failed(err))
            self._by_gen.clear()
            self._steps.observe()
            self._flush(leftovers)
            self.metrics.queue_size.set(0)
            self._set_running(0)

    def _turn(self, batch) -> None:
        """One step boundary of the generation batch: rows that must leave go, waiting requests join (one encoder
        call for them), then ONE decoder step for every row; the requests whose state changed are woken together."""
        now = time.perf_counter()
        touched: list[Ticket] = []
        self._drop_rows(batch, now, touched)
        rows = len(batch)
        if self._encoded:
            rows += self._join_encoded(batch, rows, now, touched)
        joining, ahead = self._take_waiting(rows, now, touched)
        if joining or ahead:
            self._start(batch, joining, ahead, touched)
        self._set_running(len(batch))
        if len(batch):
            self._step(batch, touched)
        self._flush(touched)

    def _drop_rows(self, batch, now: float, touched: list[Ticket]) -> None:
        """Rows that must leave before this step: cancelled, or past their deadline."""
        leaving = []
        for t in list(self._by_gen.values()):
            if t.cancelled:
                leaving.append(t)
                self._finish(t, None)
            elif now > t.deadline:
                leaving.append(t)
                self._finish(t, Failed(TimedOut(self.request_timeout_s)))
                touched.append(t)
        if leaving:
            batch.remove([t.generation for t in leaving])
            for t in leaving:
                del self._by_gen[id(t.generation)]

    def _take_waiting(self, rows: int, now: float, touched: list[Ticket]) -> tuple[list[Ticket], list[Ticket]]:
        """The waiting requests that join this step, up to the batch bound (a request counts its rows: beams,
        best_of samples), groups taking turns, and those encoded ahead with them (`_encoded`) when half a batch or
        more waits; queued requests cancelled or past their deadline leave the queue."""
        joining: list[Ticket] = []
        ahead: list[Ticket] = []
        with self._cv:
            if self._shares:
                self._next_chunks(now, touched)
            # encoded ahead only where half a batch waits: a shorter queue is served by the rows that free up, and the
            # longer encoder call would lengthen the step for the running rows (inter-token latency) for little gain
            deep = self._n_waiting >= 2 * self.join_group
            if deep and not self._encoded and rows + self._waiting[0][0].options.n_rows <= self.max_batch_size:
                # one encoder call for a quarter batch, chosen by length: those that fit join, the others wait encoded
                call = pick_call(self._waiting, self.join_group, now)
                self._n_waiting -= len(call)
                for t in call:
                    if not ahead and rows + t.options.n_rows <= self.max_batch_size:
                        joining.append(t)
                        rows += t.options.n_rows
                    else:  # once one waits encoded, the call's later ones do too: they join in this order
                        ahead.append(t)
            while self._waiting and not ahead and rows + self._waiting[0][0].options.n_rows <= self.max_batch_size:
                group = self._waiting.popleft()
                t = group.popleft()
                self._n_waiting -= 1
                if group:  # its next ticket waits for the other groups' turns
                    self._waiting.append(group)
                if t.cancelled:
                    self._finish(t, None)
                elif now > t.deadline:
                    self._finish(t, Failed(TimedOut(self.request_timeout_s)))
                    touched.append(t)
                else:
                    joining.append(t)
                    rows += t.options.n_rows
            # queued requests past their deadline (or cancelled) leave the queue too, not only the ones at its head;
            # the whole queue is read at most every QUEUE_SCAN_S, not at every step: a look costs in proportion to the queue
            expired = []
            if now >= self._next_queue_scan:
                self._next_queue_scan = now + QUEUE_SCAN_S
                expired = [t for group in self._waiting for t in group if t.cancelled or now > t.deadline]
            if expired:
                gone = set(map(id, expired))
                kept = (collections.deque(t for t in group if id(t) not in gone) for group in self._waiting)
                self._waiting = collections.deque(group for group in kept if group)
                self._n_waiting -= len(expired)
                for t in expired:
                    self._finish(t, None if t.cancelled else Failed(TimedOut(self.request_timeout_s)))
                    touched.append(t)
            self.metrics.queue_size.set(self._n_waiting)
        return joining, ahead

    def _join_encoded(self, batch, rows: int, now: float, touched: list[Ticket]) -> int:
        """Requests encoded ahead join, in order, as far as the batch has room; those cancelled or past their deadline
        end here. Returns the rows that joined."""
        gens, sources, joined = [], [], 0
        while self._encoded and rows + joined + self._encoded[0][0].options.n_rows <= self.max_batch_size:
            t, gen, source = self._encoded.popleft()
            if t.cancelled or now > t.deadline:
                self._finish(t, None if t.cancelled else Failed(TimedOut(self.request_timeout_s)))
                touched.append(t)
                continue
            gens.append(gen)
            sources.append(source)
            self._by_gen[id(gen)] = t
            joined += t.options.n_rows
        if gens:
            batch.add(gens, sources)
        return joined

    def _start(self, batch, joining: list[Ticket], ahead: list[Ticket], touched: list[Ticket]) -> None:
        """One encoder call for the joining requests and those encoded ahead; the first join the batch, the others
        wait encoded (`_encoded`)."""
        group = joining + ahead
        t0 = time.perf_counter()
        try:
            gens, sources = self.engine.start([(t.source_ids, t.options) for t in group])
        except InputError:  # the handlers validate first; find the request the engine still refuses
            group, gens, sources = self._start_one_by_one(group, touched)
        t1 = time.perf_counter()
        if not group:
            return
        self.metrics.encoder_duration.observe(t1 - t0)
        now_joining = {id(t) for t in joining}
        added_gens, added_sources = [], []
        observe_counted(self.metrics.queue_duration, [(t0 - t.t_arrival, 1) for t in group])
        observe_counted(self.metrics.input_tokens, [(len(t.source_ids), 1) for t in group])
        for t, gen, source in zip(group, gens, sources):
            t.generation = gen
            t.t_admitted = t0
            if id(t) in now_joining:
                self._by_gen[id(gen)] = t
                added_gens.append(gen)
                added_sources.append(source)
            else:
                self._encoded.append((t, gen, source))
        if added_gens:
            batch.add(added_gens, added_sources)

    def _step(self, batch, touched: list[Ticket]) -> None:
        """ONE decoder step for every row; each request's tokens, its wake-up, and the rows that finished leave."""
        n_rows = len(batch)  # one token per row this step
        t0 = time.perf_counter()
        results: list[StepResult] = self.engine.step(batch)
        t1 = time.perf_counter()
        steps_due = self._steps.add(t1 - t0, n_rows)
        finished = []
        first: list[float] = []  # times to first token, observed together after the loop
        gaps = self._steps.gaps  # inter-token gaps -> how many: every streaming row has the same one (the step)
        for r in results:
            t = self._by_gen[id(r.generation)]
            if t.t_first_token is None:
                t.t_first_token = t1
                first.append(t1 - t.t_arrival)
            else:
                gap = t1 - t.t_last_token
                gaps[gap] = gaps.get(gap, 0) + 1
            t.t_last_token = t1
            # a streaming request gets an event per token; one of several rows gets one at its end
            t.n_tokens = t.n_tokens + 1 if r.generation.streams else r.generation.generated_tokens
            t._events.append(r)
            if r.finish_reason is not None:
                finished.append(t)
                self._mean_request_s = 0.9 * self._mean_request_s + 0.1 * (t1 - t.t_arrival)
                self._finish(t, Finished(r.finish_reason))
                touched.append(t)
            elif t.streaming_owner and (t.n_tokens == 1 or t1 - t.t_woken >= self.stream_interval_s):
                t.t_woken = t1
                touched.append(t)
        if first:
            observe_counted(self.metrics.time_to_first_token, [(x, 1) for x in first])
        if finished:
            observe_counted(self.metrics.inference_duration, [(t1 - t.t_admitted, 1) for t in finished])
            observe_counted(self.metrics.generated_tokens, [(t.n_tokens, 1) for t in finished])
            batch.remove([t.generation for t in finished])
            for t in finished:
                del self._by_gen[id(t.generation)]
        if finished or steps_due or not len(batch):  # before `_flush` wakes the owners of the finished requests
            self._steps.observe()
        self._set_running(len(batch))

    def _set_running(self, n: int) -> None:
        """attnserve_running_sequences, set when it changes (a gauge's `set` takes a lock)."""
        if n != self._running:
            self._running = n
            self.metrics.running_sequences.set(n)

    def _score_turn(self, forced: ForcedBatch) -> None:
        """The scoring batch's step boundary, as `_turn`'s: cancelled and expired requests leave, waiting ones join
        (all their targets' rows, up to `max_batch_size` rows), then ONE decoder call over given tokens."""
        now = time.perf_counter()
        touched: list[Ticket] = []
        gone = [t for t in forced.jobs if t.cancelled or now > t.deadline]
        if gone:
            forced.remove(gone)
            for t in gone:
                self._finish(t, None if t.cancelled else Failed(TimedOut(self.request_timeout_s)))
                touched.append(t)
        joining: list[ScoreTicket] = []
        with self._cv:
            rows = len(forced)
            while self._scoring and rows + len(self._scoring[0].targets) <= self.max_batch_size:
                t = self._scoring.popleft()
                if t.cancelled or now > t.deadline:
                    self._finish(t, None if t.cancelled else Failed(TimedOut(self.request_timeout_s)))
                    touched.append(t)
                else:
                    joining.append(t)
                    rows += len(t.targets)
        for t in joining:
            t.t_admitted = now
        if joining:
            try:
                forced.add(joining)
            except InputError:  # the handlers validate first; find the request the engine still refuses
                for t in joining:
                    try:
                        forced.add([t])
                    except InputError as exc:
                        self._finish(t, Failed(InvalidRequest(str(exc))))
                        touched.append(t)
        if len(forced):
            for t in forced.step():
                t.t_last_token = time.perf_counter()
                self._finish(t, Finished("scored"))
                touched.append(t)
        self._flush(touched)

    def _next_chunks(self, now: float, touched: list[Ticket]) -> None:
        """Queue long texts' waiting words as the bound has room, each text up to its chunk, the texts in turn (engine
        thread, holding the lock). A word cancelled or past its deadline while waiting ends here."""
        for _ in range(len(self._shares)):
            if self._in_flight >= self.max_concurrent_requests:
                return  # the texts not served keep their place at the front
            share = self._shares.popleft()
            queued: list[Ticket] = []
            while share.held and share.active < share.chunk and self._in_flight < self.max_concurrent_requests:
                t = share.held.popleft()
                if t.cancelled or now > t.deadline:
                    self._finish(t, None if t.cancelled else Failed(TimedOut(self.request_timeout_s)))
                    touched.append(t)
                    continue
                t.counted = True
                share.active += 1
                self._in_flight += 1
                queued.append(t)
            if queued:
                self._waiting.append(collections.deque(queued))
                self._n_waiting += len(queued)
            if share.held:
                self._shares.append(share)

    def _start_one_by_one(self, group: list[Ticket], touched: list[Ticket]) -> tuple[list[Ticket], list[Generation], list]:
        """engine.start per request, so one refused request fails alone (InvalidRequest), not its whole group."""
        started, gens, sources = [], [], []
        for t in group:
            try:
                one, source = self.engine.start([(t.source_ids, t.options)])
                gens += one
                sources += source
                started.append(t)
            except InputError as exc:
                self._finish(t, Failed(InvalidRequest(str(exc))))
                touched.append(t)
        return started, gens, sources

    def _finish(self, t: Ticket, last: Finished | Failed | None) -> None:
        """Close a ticket (engine thread): its last event, and its slot back to the admission bound."""
        if t.done:
            return
        t.done = True
        if last is not None:
            t._events.append(last)
        if not t.counted:  # a long text's word that ended while it waited uncounted (`TextShare`)
            return
        with self._cv:
            self._in_flight -= 1
            if t.share is not None:
                t.share.active -= 1

    def _flush(self, touched: list[Ticket]) -> None:
        """Wake the owners of tickets that got events: one callback per event loop per step."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Ticket]] = {}
        for t in touched:
            if t.loop is None:
                t._wake()
            else:
                by_loop.setdefault(t.loop, []).append(t)
        for loop, tickets in by_loop.items():
            try:
                loop.call_soon_threadsafe(_set_all, tickets)
            except RuntimeError:  # the loop has closed: nobody is waiting any more
                pass


def _set_all(tickets: list[Ticket]) -> None:
    for t in tickets:
        if t.on_ready is None:
            t._async_ready.set()
        else:
            t.on_ready()
