"""What the scheduler's owners hold: a request as the engine thread sees it (`Ticket`, `ScoreTicket`), the events
that end it (`Finished`, `Failed`), and a long text's words waiting for their turn to count (`TextShare`).

The engine thread (service/engine/scheduler.py) appends events to a ticket and wakes its owner; the owner (the
HTTP handlers on the event loop, or any thread through the in-process API) reads them here.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from attnserve.service.engine.engine import DecodingOptions, Generation
from attnserve.service.engine.scoring import FORCED_OPTIONS, TargetScore
from attnserve.service.errors import ServiceError


@dataclass(frozen=True)
class Finished:
    """The last event of a ticket that completed."""

    finish_reason: str


@dataclass(frozen=True)
class Failed:
    """The last event of a ticket that ended with an error (timeout, shutdown, engine failure)."""

    error: ServiceError


class Ticket:
    """One generation request as the scheduler sees it.

    The engine thread appends `StepResult`s and finally a `Finished` or
    `Failed`; the owner reads them with `wait_events` or `take_events` (asyncio) or
    `next_events_blocking` (threads). `cancel()` asks the engine thread to
    drop the row at the next step boundary.
    """

    def __init__(
        self,
        source_ids: list[int],
        options: DecodingOptions,
        deadline: float,
        loop: asyncio.AbstractEventLoop | None,
        ready: asyncio.Event | None = None,
    ):
        self.source_ids = source_ids
        self.options = options
        self.deadline = deadline  # time.perf_counter() value
        self.loop = loop
        self.generation: Generation | None = None
        self.cancelled = False
        self.done = False  # set by the engine thread with the last event
        self.t_arrival = time.perf_counter()
        self.t_admitted: float | None = None  # encoder call began
        self.t_first_token: float | None = None
        self.t_last_token: float | None = None
        self.t_woken = 0.0  # when the engine last woke a streaming owner (the stream interval counts from it)
        self.n_tokens = 0
        self._events: collections.deque = collections.deque()
        # an owner that reads the answer whole shares one `ready` among its tickets and is woken only when
        # one ends (a wake-up is a task step on the event loop: one per token per request adds up under load)
        self.streaming_owner = ready is None  # reads tokens as they come: woken per token (within the stream interval)
        self._async_ready = (ready or asyncio.Event()) if loop is not None else None
        self._thread_ready = threading.Event() if loop is None else None
        # whether it counts toward `max_concurrent_requests` now: a long text's words past its chunk wait uncounted
        # in their `TextShare` until one of the text's counted words finishes (`Scheduler.submit_many(chunk=...)`)
        self.counted = True
        self.share: TextShare | None = None
        self.passed_over = 0  # encoder calls that chose others of a nearer length (service/engine/waiting.py)
        # an asyncio owner that reads the events in the engine's own per-step callback (service/http/generation.py):
        # called there instead of setting the ticket's event
        self.on_ready: Callable[[], None] | None = None

    def cancel(self) -> None:
        self.cancelled = True

    def _wake(self) -> None:  # engine thread, threads-owned tickets only
        self._thread_ready.set()

    async def wait_events(self) -> list:
        """Events so far, waiting for them; [] when `wake` woke it first. Cancel-safe."""
        self._async_ready.clear()
        if not self._events:
            await self._async_ready.wait()
        return self._drain()

    def wake(self) -> None:
        """Wake the owner's `wait_events` without an event (event-loop thread: the owner's own timer)."""
        self._async_ready.set()

    def take_events(self) -> list:
        """Events so far, possibly none, without waiting (an owner waiting on the `ready` it shares)."""
        return self._drain()

    def next_events_blocking(self, timeout: float | None = None) -> list:
        while True:
            self._thread_ready.clear()
            if self._events:
                return self._drain()
            if not self._thread_ready.wait(timeout):
                return []

    def _drain(self) -> list:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    def timings(self) -> dict[str, float]:
        """Seconds: total, queue, inference, per token (TGI's x-* headers, which send them in ms)."""
        end = self.t_last_token or time.perf_counter()
        admitted = self.t_admitted or end
        inference = end - admitted
        return {
            "total": time.perf_counter() - self.t_arrival,
            "queue": admitted - self.t_arrival,
            "inference": inference,
            "per_token": inference / self.n_tokens if self.n_tokens else 0.0,
        }


class ScoreTicket(Ticket):
    """A scoring request (service/engine/scoring.py): one source and its targets' ids, without the end token. When it
    ends with `Finished`, `scores` holds one TargetScore per target, in order."""

    def __init__(
        self,
        source_ids: list[int],
        targets: list[list[int]],
        deadline: float,
        loop: asyncio.AbstractEventLoop | None,
        top_n_tokens: int = 0,
    ):
        super().__init__(source_ids, FORCED_OPTIONS, deadline, loop)
        self.targets = [list(t) for t in targets]
        self.top_n_tokens = top_n_tokens
        self.scores: list[TargetScore | None] = [None] * len(self.targets)


class TextShare:
    """A long text's words that wait for their turn to count toward `max_concurrent_requests`: at most `chunk` of the
    text's words count (queued or running) at once; the engine thread admits the next one when one of them finishes
    and the bound has room. The words wait here, not in the queue, so they hold no slot of the bound."""

    def __init__(self, tickets: list[Ticket], chunk: int):
        self.held: collections.deque[Ticket] = collections.deque(tickets)
        self.chunk = chunk
        self.active = 0  # the text's words counted now (queued or running)
