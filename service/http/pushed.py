"""A /generate_stream answer written by the engine's wake-ups themselves, not by a task woken per token.

The scheduler wakes the event loop once per decoder step with every ticket that step gave events to
(`Scheduler._flush`). A stream read by an async generator then costs, per token, an asyncio.Event, a task's
wake-up and a pass through two generator layers before the body's bytes reach the server. Here the ticket's
`on_ready` is the stream's own `wake`: that one per-step callback reads the new events (`StreamReader`), writes
them (`SSEWriter`: the same events, in the same chunks) and hands the chunk to the server's `send` at once.

The server's `send` is a coroutine that finishes without waiting unless the client reads slower than the server
writes (its transport's buffer full): `_send` runs it to its end when it can, and otherwise lets a task finish it and
send what follows, in order. The request's task waits for the client's disconnect only (which is also what the
server reports once the response is complete), so it listens without a task of its own; a disconnect before the end
cancels the request as a cancelled streaming generator did.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import types
from collections.abc import Generator
from typing import Any

from starlette.types import Message, Receive, Send

from service.engine.tickets import Ticket
from service.http.responses import LastChunk, SSEWriter
from service.requests.frontend import TextRequest
from service.requests.streaming import StreamReader

log = logging.getLogger("attnserve.service")


async def push_stream(
    job: TextRequest, writer: SSEWriter, headers: list[tuple[bytes, bytes]], keepalive_s: float, receive: Receive, send: Send
) -> None:
    """Answer a stream: the response's start, then its body from the engine's wake-ups, until the response is
    complete or the client has gone."""
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    stream = PushedStream(job, writer, send, keepalive_s)
    try:
        stream.start()
        while (await receive())["type"] != "http.disconnect":
            pass
    except asyncio.CancelledError:
        if stream.error is None:
            raise
        asyncio.current_task().uncancel()
        raise stream.error from None
    finally:
        stream.close()
        if stream.sending is not None:
            await stream.sending


class PushedStream:
    """One stream's body, written from the wake-ups of the tickets it reads (see the module's docstring)."""

    def __init__(self, job: TextRequest, writer: SSEWriter, send: Send, keepalive_s: float):
        self.reader = StreamReader(job)
        self.writer = writer
        self.send = send
        self.keepalive_s = keepalive_s
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.last_write = self.loop.time()
        self.sending: asyncio.Future | None = None  # a send that had to wait, and the backlog after it
        self.error: BaseException | None = None  # what a send raised: the request's task raises it
        self.closed = False  # the request's task is past its wait for the disconnect
        self._backlog: collections.deque[Message] = collections.deque()
        self._watched: Ticket | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._write(self.reader.read([]))
        if not self.writer.ended:
            self._timer = self.loop.call_at(self.last_write + self.keepalive_s, self._check_quiet)

    def wake(self) -> None:
        """The ticket being read has events (the scheduler's per-step callback, on the event loop)."""
        if self.writer.ended or self.closed or self.reader.reading is None:
            return
        try:
            events = self.reader.reading.take_events()
            if events:
                self._write(self.reader.read(events))
        except Exception as e:  # one stream's failure must not stop the callback that wakes the others
            log.exception("stream failed")
            self._fail(e)

    def close(self) -> None:
        """The request's task is done with the stream: what has not ended (the client went away) is cancelled."""
        self.closed = True
        self._stop()
        self.writer.close()

    def _write(self, items: list) -> None:
        """Send what `items` make, then watch the ticket whose events come next (if the stream goes on)."""
        if items:
            self.last_write = self.loop.time()
            for chunk in self.writer.add(items):
                self._send({"type": "http.response.body", "body": chunk, "more_body": not isinstance(chunk, LastChunk)})
        if self.writer.ended:
            self._stop()
            self.writer.close()
        else:
            self._watch(self.reader.reading)

    def _watch(self, ticket: Ticket | None) -> None:
        if ticket is not self._watched:
            if self._watched is not None:
                self._watched.on_ready = None
            self._watched = ticket
            if ticket is not None:
                ticket.on_ready = self.wake

    def _stop(self) -> None:
        self._watch(None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_quiet(self) -> None:
        """A keep-alive comment when nothing was written for keepalive_s (one timer per stream, re-armed as it fires)."""
        if self.writer.ended:
            return
        if self.loop.time() - self.last_write >= self.keepalive_s:
            self._write([None])
        self._timer = self.loop.call_at(self.last_write + self.keepalive_s, self._check_quiet)

    def _send(self, message: Message) -> None:
        if self.sending is not None:
            self._backlog.append(message)
            return
        sent = self.send(message)
        try:
            waiting_on = sent.send(None)
        except StopIteration:
            return
        except Exception as e:
            self._fail(e)
            return
        self.sending = asyncio.ensure_future(self._finish_sending(sent, waiting_on))

    async def _finish_sending(self, sent, waiting_on: Any) -> None:
        try:
            await _resume(sent, waiting_on)
            while self._backlog:
                await self.send(self._backlog.popleft())
        except Exception as e:
            self._fail(e)
        finally:
            self.sending = None

    def _fail(self, error: BaseException) -> None:
        """A send failed (or the stream's own code did): nothing more is written; the request's task raises it."""
        self._stop()
        self.writer.ended = True
        if self.closed:  # the request's task is past its wait, and ends as it is: the failure is only told
            log.warning("a stream's send failed after its request ended: %r", error)
        elif self.error is None:
            self.error = error
            self.task.cancel()


@types.coroutine
def _resume(coroutine, waiting_on: Any) -> Generator[Any, Any, None]:
    """Go on with a coroutine that was run by hand until it waited on `waiting_on`, in the task that awaits this."""
    while True:
        try:
            sent = yield waiting_on
        except BaseException as e:  # noqa: BLE001 - the task's cancellation goes on into the coroutine
            try:
                waiting_on = coroutine.throw(e)
            except StopIteration:
                return
        else:
            try:
                waiting_on = coroutine.send(sent)
            except StopIteration:
                return
