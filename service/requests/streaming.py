"""A request's answer read as a stream, in text order, without waiting: what a wake-up of the engine adds to it.

`StreamReader.read` takes the events of the ticket being read (none at the start) and gives what follows in the
stream: the tokens, `CAUGHT_UP` after each batch of them, and the next units' tokens as far as they are ready (a
lexicon word's at once, an engine word's as far as its ticket has events); or a `Failed` that ends the stream.
Then `reading` is the ticket whose events come next, or `ended` is true.

Two owners read a stream this way: service/http/generation.py (/generate_stream and a one-choice /v1 stream, handed
each wake-up by the scheduler's per-step callback) and `stream_items` (an async generator that waits on the ticket:
`AdmittedRequest.stream_items`, for a /v1 stream of several choices, whose chunks are merged).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from attnserve.service.engine.engine import Engine
from attnserve.service.engine.scheduler import Failed, Finished, Ticket
from attnserve.service.requests.alphabets import FormStream, OutputForm
from attnserve.service.requests.units import CAUGHT_UP, CaughtUp, StreamToken, Token, Unit, step_token, top_tokens


class Streamed(Protocol):
    """What a stream reads of its request (service.requests.frontend.AdmittedRequest, which imports this module)."""

    engine: Engine
    units: list[Unit]
    form: OutputForm | None

    def separated(self, token: Token, unit: int, position: int) -> Token:
        """A token of running text with the word separator in front of a word's first token."""

    def answers(self, u: Unit) -> tuple[list, list | None]:
        """A finished unit's answers in the request's form, best first, and its top tokens."""


class StreamReader:
    """One request's stream, read wake-up by wake-up (see the module's docstring)."""

    def __init__(self, job: Streamed):
        self.job = job
        self.k = -1  # the unit being read
        self.reading: Ticket | None = None  # its ticket, while the engine is still answering it
        self.ended = False  # the last unit's tokens have all been given, or a Failed was
        self._position = 0  # tokens given of the unit being read
        self._written: FormStream | None = None

    def read(self, events: list) -> list[StreamToken | Failed | CaughtUp]:
        """What `events` (of the ticket being read; [] at the start) add to the stream, then the following units'
        tokens as far as they are ready."""
        out: list[StreamToken | Failed | CaughtUp] = []
        if self.reading is not None:
            if not events or not self._take(events, out):
                return out
            self.reading = None
        units = self.job.units
        while not self.ended:
            self.k += 1
            if self.k == len(units):
                self.ended = True
                if not units:  # a text of no words (punctuation alone): its stream is the end token alone
                    end = Token(self.job.engine.eos_id, "", None, True)
                    out += [StreamToken(end, None, "eos_token", True), CAUGHT_UP]
                break
            u = units[self.k]
            if u.ticket is None:
                self._known(u, out)
                continue
            self.reading, self._position = u.ticket, 0
            self._written = FormStream(self.job.form) if self.job.form is not None else None
            events = u.ticket.take_events()
            if not events or not self._take(events, out):
                break
            self.reading = None
        return out

    def _known(self, u: Unit, out: list) -> None:
        """A unit the lexicon (or the reader's rules) answered: its tokens at once."""
        job, k = self.job, self.k
        last_unit = k == len(job.units) - 1
        tokens = job.answers(u)[0][0].tokens  # in the request's form, as the answer whole writes them
        for j, t in enumerate(tokens):
            end = j == len(tokens) - 1
            reason = u.known[0].finish_reason if end else None
            out.append(StreamToken(job.separated(t, k, j), None, reason, last_unit and end, k if end else None))
        out.append(CAUGHT_UP)

    def _take(self, events: list, out: list) -> bool:
        """The events of the unit being read: whether it has finished (a Failed ends the stream: False)."""
        job, k = self.job, self.k
        u = job.units[k]
        last_unit = k == len(job.units) - 1
        for ev in events:
            if isinstance(ev, Failed):
                out.append(ev)
                self.ended = True
                return False
            if isinstance(ev, Finished):
                u.finished = ev
                break
            u.results.append(ev)
            top = None
            if ev.top_tokens is not None:
                prefix = [r.token_id for r in u.results[:-1]]
                top = top_tokens(job.engine, ev.top_tokens, prefix)
            ready = (
                [(step_token(ev), top, ev.finish_reason)]
                if self._written is None
                else self._written.push(step_token(ev), top, ev.finish_reason)
            )
            for token, top, reason in ready:
                if top is not None:
                    top = [job.separated(t, k, self._position) for t in top]
                token = job.separated(token, k, self._position)
                self._position += 1
                out.append(StreamToken(token, top, reason, last_unit and reason is not None, None if reason is None else k))
        out.append(CAUGHT_UP)
        return u.finished is not None


async def stream_items(job: Streamed, keepalive_s: float) -> AsyncIterator[StreamToken | Failed | CaughtUp | None]:
    """A request's tokens in text order as the engine makes them: StreamToken per token (a lexicon word's at once),
    CAUGHT_UP after the tokens of each wake-up, None after `keepalive_s` without one, or a Failed that ends the
    stream."""
    # one timer per stream, re-armed only when it fires, not a timeout per token: it wakes the ticket
    # being read, which then answers a keep-alive if nothing was yielded for keepalive_s
    loop = asyncio.get_running_loop()
    last_yield = loop.time()
    reader = StreamReader(job)

    def check_quiet() -> None:
        nonlocal timer
        quiet_until = last_yield + keepalive_s
        if loop.time() >= quiet_until and reader.reading is not None:
            reader.reading.wake()
            quiet_until = loop.time() + keepalive_s
        timer = loop.call_at(quiet_until, check_quiet)

    timer = loop.call_at(last_yield + keepalive_s, check_quiet)
    try:
        items = reader.read([])
        while True:
            for item in items:
                if item is CAUGHT_UP:
                    last_yield = loop.time()
                yield item
            if reader.ended:
                return
            events = await reader.reading.wait_events()
            if not events:  # woken by the timer (or late by a step whose events were taken already)
                if loop.time() - last_yield >= keepalive_s:
                    last_yield = loop.time()
                    yield None
                items = ()
                continue
            items = reader.read(events)
    finally:
        timer.cancel()
        # check_quiet's closure holds itself and the timer (which holds check_quiet): cut both, so the stream's
        # state is freed now rather than by the cyclic collector
        timer = check_quiet = None
