"""An OpenAI completion's stream: per choice, a chunk per token gathered into one write per wake-up of the engine, its
last chunk with the finish reason, then the usage chunk when asked and `data: [DONE]`. The requests and whole answers
are service/http/openai/completions.py's; the choice objects of the chunks, shapes.py's (`Render`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

import orjson

from attnserve.service.engine.scheduler import Failed
from attnserve.service.errors import ServiceError
from attnserve.service.http import errors
from attnserve.service.http.openai.choices import ChoiceText, TokenOut
from attnserve.service.http.openai.completions import Plan, cancel_all
from attnserve.service.http.openai.errors import OpenAIError, from_error
from attnserve.service.http.responses import LastChunk, word_span
from attnserve.service.http.state import Service
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.units import CaughtUp, StreamToken

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


class ChoiceEnd(bytes):
    """A choice's last chunk (its finish_reason): with one choice, the stream's usage chunk and [DONE] go out in the
    same write."""


class Render(Protocol):
    """A route's choice object of a stream chunk (service/http/openai/shapes.py)."""

    def __call__(self, index: int, text: str, tokens: list[TokenOut], finish: str | None, first: bool) -> dict:
        """The choice of a chunk: its index, the text it adds, the tokens it shows, its finish reason, whether first."""

    def plain(self, index: int, text: str) -> bytes | None:
        """The JSON of `self(index, text, [], None, False)` (what orjson makes of it) written from pre-encoded parts,
        for most of a stream's chunks; None where the choice shows more (log-probabilities)."""


async def stream_answer(
    svc: Service,
    planned: Plan,
    jobs: list[list[AdmittedRequest]],
    route: str,
    envelope: dict,
    render: Render,
) -> AsyncIterator[bytes]:
    """The SSE body of several choices (one choice's is `OneChoiceWriter`'s): per choice, a chunk per token gathered
    into one write per wake-up (`render` makes the choice object), its last chunk with `finish_reason`; then a usage
    chunk with `choices: []` when asked, then `data: [DONE]`. A failure mid-stream is an `error` event in OpenAI's
    shape, and ends it."""
    outcome = "cancelled"
    head, tail = chunk_event_parts(envelope)
    choices = [
        ChoiceStream(job, i * planned.n + j, ChoiceText(planned.stop), render, head, tail)
        for i, row in enumerate(jobs)
        for j, job in enumerate(row)
    ]
    try:
        async for chunk in _merged([_choice_chunks(svc, choice) for choice in choices]):
            yield chunk
        ending = _usage(planned, jobs, envelope, choices)
        outcome = "success"
        svc.metrics.request_duration.observe(time.perf_counter() - jobs[0][0].t_arrival)
        yield LastChunk(ending + DONE)  # the last events and the body's end: one write
    except (errors.APIError, ServiceError, OpenAIError) as e:
        err = from_error(e, planned.params)
        outcome = err.outcome
        yield _event(err.body())
    finally:
        cancel_all(jobs)
        svc.metrics.request_done(route, outcome)


def _usage(planned: Plan, jobs: list[list[AdmittedRequest]], envelope: dict, choices: list[ChoiceStream]) -> bytes:
    """The usage chunk, when asked for."""
    if not planned.include_usage:
        return b""
    prompt_tokens = sum(row[0].input_length for row in jobs)
    completion = sum(choice.text.tokens for choice in choices)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}
    return _event({**envelope, "choices": [], "usage": usage})


class OneChoiceWriter:
    """The body of a one-choice stream from its request's items, batch by batch: what `stream_answer` yields for it,
    and what service/http/generation.py writes from the engine's wake-ups. The choice's last chunk, the
    usage chunk and [DONE] go as one LastChunk; a failure is an `error` event in OpenAI's shape, and ends it. `close`
    ends the request's accounting (its outcome counted, its tickets cancelled)."""

    def __init__(
        self, svc: Service, planned: Plan, jobs: list[list[AdmittedRequest]], route: str, envelope: dict, render: Render
    ):
        self.svc, self.planned, self.jobs, self.route, self.envelope = svc, planned, jobs, route, envelope
        head, tail = chunk_event_parts(envelope)
        self.choice = ChoiceStream(jobs[0][0], 0, ChoiceText(planned.stop), render, head, tail)
        self.outcome = "cancelled"
        self.ended = self.closed = False

    def add(self, items) -> list[bytes]:
        chunks: list[bytes] = []
        try:
            for item in items:
                if self.ended:
                    break
                out = self.choice.take(item)
                if isinstance(out, ChoiceEnd):
                    chunks.append(LastChunk(out + _usage(self.planned, self.jobs, self.envelope, [self.choice]) + DONE))
                    self.outcome = "success"
                    self.ended = True
                    self.svc.metrics.request_duration.observe(time.perf_counter() - self.jobs[0][0].t_arrival)
                elif out:
                    chunks.append(out)
        except (errors.APIError, ServiceError, OpenAIError) as e:
            err = from_error(e, self.planned.params)
            self.outcome = err.outcome
            chunks.append(LastChunk(_event(err.body())))
            self.ended = True
        return chunks

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        cancel_all(self.jobs)
        self.svc.metrics.request_done(self.route, self.outcome)


class ChoiceStream:
    """One choice of a stream: its request's items become its chunks' bytes, gathered per wake-up of the engine."""

    def __init__(self, job: AdmittedRequest, index: int, text: ChoiceText, render: Render, head: bytes, tail: bytes):
        self.job, self.index, self.text, self.render = job, index, text, render
        self.head, self.tail = head, tail  # the bytes around a chunk's one choice (`chunk_event_parts`)
        self.gathered: list[bytes] = []
        self.first = True

    def take(self, item: StreamToken | Failed | CaughtUp | None) -> bytes | None:
        """What to write after `item`: the events gathered when caught up with the engine, a keep-alive comment, or
        nothing yet; the choice's last chunk as a ChoiceEnd (its request then ends: a stop sequence may end running
        text before its last word). A failure raises its error."""
        if item is None:
            return KEEPALIVE
        if isinstance(item, CaughtUp):
            out = b"".join(self.gathered)
            self.gathered.clear()
            return out
        if isinstance(item, Failed):
            raise item.error
        delta, released, finish = self.text.add(item.token, item.top_tokens, item.finish_reason if item.last else None)
        # with `details`, the chunk of the token that completes a word carries its index and span (an end token adds
        # no text: its chunk's content is "")
        word = word_span(self.job, item.word) if item.word is not None and self.job.output.words_only else None
        if finish:
            choice = orjson.dumps(self.with_word(self.render(self.index, delta, released, finish, self.first), word))
            self.gathered.append(self.head + choice + self.tail)
            self.job.cancel()
            return ChoiceEnd(b"".join(self.gathered))
        if delta or released or word is not None:
            choice = None if self.first or word is not None else self.render.plain(self.index, delta)
            if choice is None:
                choice = orjson.dumps(self.with_word(self.render(self.index, delta, released, None, self.first), word))
            self.gathered.append(self.head + choice + self.tail)
            self.first = False
        return None

    @staticmethod
    def with_word(choice: dict, word: dict | None) -> dict:
        if word is not None:
            choice["word"] = word
        return choice


async def _choice_chunks(svc: Service, choice: ChoiceStream) -> AsyncIterator[bytes]:
    """One choice's chunks as a generator of its own (several choices are merged as they come)."""
    async for item in choice.job.stream_items(svc.keepalive_s):
        out = choice.take(item)
        if isinstance(out, ChoiceEnd):
            yield out
            return
        if out:
            yield out


async def _merged(streams: list[AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
    """The chunks of several choices as they come (each choice's in order)."""
    queue: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump(stream: AsyncIterator[bytes]) -> None:
        try:
            async for chunk in stream:
                await queue.put(chunk)
            await queue.put(end)
        except Exception as e:  # handed to the reader, which ends the stream with it
            await queue.put(e)

    tasks = [asyncio.ensure_future(pump(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is end:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()


def chunk_event_parts(envelope: dict) -> tuple[bytes, bytes]:
    """The bytes around a chunk's one choice: `_event({**envelope, "choices": [choice]})` is head + the choice's JSON
    + tail (orjson keeps the keys' order), so a token's event serializes only its choice, not the envelope again."""
    head = _event({**envelope, "choices": []})
    cut = head.rindex(b"[]")
    return head[: cut + 1], head[cut + 1 :]


def _event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"
