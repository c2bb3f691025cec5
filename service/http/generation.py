"""The generation routes, one handler each: POST /generate, /generate_stream, / (TGI's), /v1/completions and
/v1/chat/completions (OpenAI's).

Each route is a `GenerationRoute`. FastAPI documents it as any route: its body's schema, its answers and its security
scheme are in /docs and /openapi.json. Its requests are answered by its handler alone (`GenerationRoute.answer`),
which the front door (service/http/middleware.py) calls for a POST to its path once the request has its id and its
body is within the size limit; FastAPI's routing, dependencies and body parsing never run for these routes. The
handler owns, in this order:

- the body read as JSON (a body that is not JSON: TGI's 422 `validation`, OpenAI's 400);
- the guards, the same functions FastAPI's other routes depend on (service/http/dependencies.py): the API key, the
  service's readiness, the drain;
- the body's schema (service/http/schemas.py, service/http/openai/schemas.py: JSON types);
- admission (`Service.admit`: the request layer's validation, the lexicon, the scheduler);
- the answer, or the stream, written from the engine's wake-ups (`push_stream`);
- every error, in the route's shape (TGI's `{"error", "error_type"}` or OpenAI's), counted in the metrics; an
  unexpected exception on a TGI route is the front door's 500, on /v1 OpenAI's.

A stream's body is written by the engine's wake-ups themselves, not by a task woken per token. The scheduler wakes
the event loop once per decoder step with every ticket that step gave events to (`Scheduler._flush`); a ticket's
`on_ready` is the stream's own `wake`, which reads the new events (service/requests/streaming.py `StreamReader`),
writes them (`SSEWriter`, or /v1's `OneChoiceWriter`) and hands the chunk to the server's `send` at once. That
`send` finishes without waiting unless the client reads slower than the server writes (its transport's buffer
full): `_send` runs it to its end when it can, and otherwise lets a task finish it and send what follows, in order.
The request's task waits only for the client's disconnect (what the server also reports once the response is
complete); a disconnect before the end cancels the request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import json
import logging
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import orjson
from fastapi import Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from attnserve.service.engine.tickets import Ticket
from attnserve.service.errors import ServiceError
from attnserve.service.http import errors
from attnserve.service.http.dependencies import GENERATION_GUARDS, bearer_token, check_api_key, check_not_draining, service_of
from attnserve.service.http.openai import routes as openai
from attnserve.service.http.openai.schemas import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
)
from attnserve.service.http.responses import (
    ERROR_RESPONSES,
    SSE_CONTENT,
    SSE_HEADERS,
    SSE_RESPONSE,
    LastChunk,
    SSEResponse,
    SSEWriter,
    WrittenResponse,
    disconnect_watch,
    generate_response,
    json_response,
    timing_headers,
)
from attnserve.service.http.routes import explain, score
from attnserve.service.http.schemas import TASK_KEYS, CompatGenerateRequest, CompatResponse, GenerateRequest, GenerateResponse
from attnserve.service.http.state import Service
from attnserve.service.http.validation import ignored_headers
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.streaming import StreamReader

log = logging.getLogger("attnserve.service")

Respond = Callable[[Service, Request, Any, str], Awaitable["Answer"]]

# a stream's response headers, as Starlette's StreamingResponse writes them (built once: making one costs about as
# much as the rest of a stream's start)
SSE_RAW_HEADERS = SSEResponse(iter(()), headers=SSE_HEADERS).raw_headers
NOT_JSON = "the request body must be JSON: send it with content-type: application/json"


class GenerationRoute(APIRoute):
    """A generation route: documented by FastAPI (`doc`: APIRoute's keyword arguments; the body's schema is
    `body_model`), answered by `answer` (an ASGI app) alone. `respond(svc, request, body, path)` admits a valid body
    and gives its answer (a response, or a stream to push); `openai_shape`: its errors in OpenAI's shape, else TGI's."""

    def __init__(self, path: str, name: str, body_model: type[BaseModel], respond: Respond, openai_shape: bool, **doc):
        super().__init__(path, _documented(body_model), name=name, methods=["POST"], dependencies=GENERATION_GUARDS, **doc)
        self.body_model = body_model
        self.respond = respond
        self.openai_shape = openai_shape
        self.app = self.answer  # what Starlette's Route.handle would call; the front door calls it directly

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The one handler of this route (see the module's docstring)."""
        app, path = scope["app"], self.path
        request = Request(scope, receive)
        svc: Service | None = app.state.service
        raw = b""
        try:
            raw = (await receive())["body"]  # the front door has read it whole and replays it
            content_type, authorization = _headers(scope)
            parsed = self._parse(content_type, raw)
            check_api_key(bearer_token(authorization), app.state.settings.api_key)
            svc = service_of(app)
            check_not_draining(svc)
            try:
                body = self.body_model.model_validate(parsed)  # as FastAPI validates a body (python mode), from JSON
            except ValidationError as e:
                raise RequestValidationError(e.errors()) from None
            response = await self.respond(svc, request, body, path)
        except Exception as e:
            response = self._refusal(svc, request, raw, e)
        await response(scope, receive, send)

    def _parse(self, content_type: bytes | None, raw: bytes) -> Any:
        if not errors.declared_json(content_type):
            raise errors.validation(NOT_JSON)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            if self.openai_shape:  # OpenAI's API reads NaN and Infinity as numbers and refuses them naming the field
                with contextlib.suppress(ValueError, RecursionError):
                    return json.loads(raw)
            raise errors.validation(errors.malformed_json(raw, str(e))) from None

    def _refusal(self, svc: Service | None, request: Request, raw: bytes, e: Exception) -> Response:
        """What `answer` raised, in the route's shape, counted under the route; a TGI route raises what is no refusal
        (the front door's 500)."""
        if self.openai_shape:
            return openai.error_answer(svc, request, self.path, e)
        if isinstance(e, RequestValidationError):
            e = errors.validation(errors.describe_validation_errors(list(e.errors()), raw))
        elif isinstance(e, ServiceError):
            e = errors.api_error(e)
        if not isinstance(e, errors.APIError):
            raise e
        if svc is not None:
            svc.metrics.request_done(self.path, e.error_type)
        return errors.error_response(e)


def _documented(body_model: type[BaseModel]) -> Callable[..., Awaitable[None]]:
    """An endpoint FastAPI reads the body's schema from (its signature) and never calls."""

    async def endpoint(body):  # noqa: ANN001 - the annotation is the signature's below
        raise NotImplementedError  # GenerationRoute.answer answers the route

    param = inspect.Parameter("body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=body_model)
    endpoint.__signature__ = inspect.Signature([param])  # type: ignore[attr-defined]
    return endpoint


def _headers(scope: Scope) -> tuple[bytes | None, str]:
    """The request's content-type (None when absent) and authorization ("" when absent) headers, the first of each."""
    content_type = authorization = None
    for key, value in scope["headers"]:
        if key == b"content-type" and content_type is None:
            content_type = value
        elif key == b"authorization" and authorization is None:
            authorization = value
    return content_type, authorization.decode("latin-1") if authorization is not None else ""


# ---- TGI's routes ---------------------------------------------------------------------------------
async def tgi(svc: Service, request: Request, body: GenerateRequest, path: str) -> Answer:
    """/generate, /generate_stream and /: a stream, or the whole answer."""
    if path == "/generate_stream" or (path == "/" and body.stream):  # not getattr: pydantic's miss is slow
        job = svc.admit(body, stream=True)
        ignored = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in ignored_headers(body).items()]
        return Pushed(job, SSEWriter(job, path, svc.metrics), SSE_RAW_HEADERS + ignored, svc.keepalive_s)
    return await generate_once(svc, request, body, path, as_list=path == "/")


async def generate_once(svc: Service, request: Request, body: GenerateRequest, route: str, as_list: bool = False) -> Response:
    """Admit, wait for every token, answer GenerateResponse (TGI's `/` answers a one-element list of it)."""
    job = svc.admit(body, stream=False)
    if not await job.collect(disconnect_watch(request)):
        svc.metrics.request_done(route, "cancelled")
        return Response(status_code=499)  # nobody reads it: the client has gone
    answer = generate_response(job)
    svc.metrics.request_done(route, "success")
    svc.metrics.request_duration.observe(time.perf_counter() - job.t_arrival)
    headers = timing_headers(job.timings(), job.n_tokens()) | ignored_headers(body)
    if not as_list:
        return json_response(answer, headers)
    task_key = TASK_KEYS.get(svc.engine.bundle.meta.get("task", ""))
    return json_response([CompatResponse(**vars(answer), **({task_key: answer.generated_text} if task_key else {}))], headers)


# ---- OpenAI's routes ------------------------------------------------------------------------------
async def completions(svc: Service, request: Request, body: CompletionRequest, path: str) -> Answer:
    return _openai_answer(svc, await openai.completions(svc, request, body))


async def chat_completions(svc: Service, request: Request, body: ChatCompletionRequest, path: str) -> Answer:
    return _openai_answer(svc, await openai.chat_completions(svc, request, body))


def _openai_answer(svc: Service, response: Response) -> Answer:
    """A one-choice stream pushed from the engine's wake-ups, a stream of several choices sent as its generator
    yields, or the whole answer."""
    if isinstance(response, WrittenResponse):
        return Pushed(response.job, response.writer, response.raw_headers, svc.keepalive_s)
    if isinstance(response, StreamingResponse):
        return Streamed(response.raw_headers, response.body_iterator)
    return response


class Pushed:
    """A stream to answer with `push_stream` (an ASGI app)."""

    def __init__(self, job: AdmittedRequest, writer, headers: list[tuple[bytes, bytes]], keepalive_s: float):
        self.job, self.writer, self.headers, self.keepalive_s = job, writer, headers, keepalive_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await push_stream(self.job, self.writer, self.headers, self.keepalive_s, receive, send)


class Streamed:
    """A stream whose body an async generator yields (`_stream`; an ASGI app)."""

    def __init__(self, headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes]):
        self.headers, self.body = headers, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _stream(self.headers, self.body, receive, send)


Answer = Response | Pushed | Streamed


async def _stream(headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes], receive: Receive, send: Send) -> None:
    """What Starlette's StreamingResponse does (send each chunk; a disconnect cancels the body's generator, whose
    `finally` cancels the request), with one plain task listening instead of an anyio task group."""
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    task = asyncio.current_task()
    gone = done = False

    async def listen() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        if not done:  # after the last chunk a finished response reads as a disconnect too
            gone = True
            task.cancel()

    listener = asyncio.ensure_future(listen())
    ended = False
    try:
        async for chunk in body:
            if ended:  # nothing can follow the end of the body
                continue
            ended = done = isinstance(chunk, LastChunk)  # the last event and the body's end in one write
            await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
        if not ended:
            done = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()  # the client went away: the stream ends here, as Starlette's does
    finally:
        done = True
        listener.cancel()
        await body.aclose()  # a generator left suspended (send failed) still runs its finally now


# ---- the routes -----------------------------------------------------------------------------------
TGI_ROUTES = [
    GenerationRoute(
        "/generate",
        "generate",
        GenerateRequest,
        tgi,
        False,
        response_model=GenerateResponse,
        responses=ERROR_RESPONSES,
        summary="Generate text for one input",
    ),
    GenerationRoute(
        "/generate_stream",
        "generate_stream_route",
        GenerateRequest,
        tgi,
        False,
        responses={**ERROR_RESPONSES, 200: SSE_RESPONSE},
        response_class=SSEResponse,
        summary="Generate text for one input, streamed token by token (Server-Sent Events)",
    ),
    GenerationRoute(
        "/",
        "compat",
        CompatGenerateRequest,
        tgi,
        False,
        response_model=list[CompatResponse],
        responses={
            **ERROR_RESPONSES,
            200: {
                "description": "stream false: a one-element list; stream true: Server-Sent Events as /generate_stream",
                "content": SSE_CONTENT,
            },
        },
        summary="TGI's compatibility route (what huggingface_hub's InferenceClient calls)",
    ),
]
OPENAI_ROUTES = [
    GenerationRoute(
        openai.COMPLETIONS,
        "completions",
        CompletionRequest,
        completions,
        True,
        response_model=CompletionResponse,
        responses={**openai.ERRORS, 200: openai.SSE_DOC},
        tags=openai.TAGS,
        summary="OpenAI's completions: one prompt or a list (greedy unless temperature > 0)",
    ),
    GenerationRoute(
        openai.CHAT,
        "chat_completions",
        ChatCompletionRequest,
        chat_completions,
        True,
        response_model=ChatCompletionResponse,
        responses={**openai.ERRORS, 200: openai.SSE_DOC},
        tags=openai.TAGS,
        summary="OpenAI's chat completions: exactly one user message, answered as its text's completion",
    ),
]
# what the front door (service/http/middleware.py) hands a POST to: the generation routes this module answers
HANDLERS: dict[str, GenerationRoute] = {route.path: route for route in TGI_ROUTES + OPENAI_ROUTES}
# the one list of generation routes: their outcomes count in attnserve_requests_total, their errors too (the front
# door's, the app's handlers'); /explain and /score are FastAPI's routes, the others answered here (`HANDLERS`)
ROUTES: tuple[str, ...] = (*HANDLERS, explain.ROUTE, score.ROUTE)


# ---- streams pushed from the engine's wake-ups ----------------------------------------------------
async def push_stream(
    job: AdmittedRequest, writer, headers: list[tuple[bytes, bytes]], keepalive_s: float, receive: Receive, send: Send
) -> None:
    """Answer a stream: the response's start, then its body from the engine's wake-ups (`writer`: `SSEWriter` or
    /v1's `OneChoiceWriter`), until the response is complete or the client has gone."""
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

    def __init__(self, job: AdmittedRequest, writer, send: Send, keepalive_s: float):
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
