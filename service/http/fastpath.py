"""The generation routes' common case without FastAPI's routing, dependency and body-parsing machinery.

Under load the event loop spent more CPU per request than the engine's own decoding, most of it around a
handler that does little. The front door (service/http/middleware.py) has already done what every request
gets (the request id, the access log, the body-size limit, the 500 for the unexpected) and read the body;
for a `POST /generate`, `/generate_stream`, `/`, `/v1/completions` or `/v1/chat/completions` it calls one of
`ROUTES` here first, which answers a well-formed request itself with the very handlers of
service/http/routes/generate.py and service/http/openai/routes.py, and returns False, having sent nothing,
for any request it would have to refuse before it has a valid body (no service yet, a body that is not
declared JSON, a wrong API key, JSON that does not validate, and on /v1 a body orjson cannot read): the app's
stack answers those as it answers any request (same status, error body, headers and metrics). The routes stay
declared in the app, so /docs and the OpenAPI schema do not change.

On the TGI routes a body that is not JSON at all (not UTF-8, nested too deep, NaN or Infinity:
`errors.malformed_json`) is a 422 `validation`, answered here before the guards, as the app's TGI routes
(`errors.JSONBodyRoute`) answer it. A valid request to a draining server, and errors of admission (the text
layer's and the scheduler's refusals, a timeout), are answered with the route's error shape and status codes,
and counted in the metrics, as the app's handlers do.

A stream of one request (/generate_stream, `/` with `stream`, a /v1 stream of one choice) is written from the
engine's wake-ups themselves (service/http/pushed.py): the same events in the same chunks, without a task woken per
token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from service.errors import ServiceError
from service.http import errors
from service.http.dependencies import api_key_matches, not_draining
from service.http.openai import routes as openai
from service.http.openai.schemas import ChatCompletionRequest, CompletionRequest
from service.http.pushed import push_stream
from service.http.responses import SSE_HEADERS, LastChunk, SSEResponse, SSEWriter, WrittenResponse
from service.http.routes import generate
from service.http.schemas import CompatGenerateRequest, GenerateRequest
from service.http.validation import ignored_headers

# a stream's response headers, as the /generate_stream route's SSEResponse sends them (built once: Starlette's
# StreamingResponse costs about as much to make as the rest of a stream's start)
SSE_RAW_HEADERS = SSEResponse(iter(()), headers=SSE_HEADERS).raw_headers

Headers = dict[bytes, bytes]


def _accepted(app, headers: Headers) -> bool:
    """Whether the fast path may take the request: a service to answer it, a body declared JSON (none: read as
    JSON, as FastAPI reads it), and the server's API key when it has one."""
    if app.state.service is None:
        return False
    return errors.declared_json(headers.get(b"content-type")) and _authorized(headers, app.state.settings.api_key)


async def answer_tgi(app, scope: Scope, headers: Headers, raw: bytes, receive: Receive, send: Send) -> bool:
    """A TGI generation request (/generate, /generate_stream, /); False: the app's stack is to answer it."""
    route = scope["path"]
    if not _accepted(app, headers):
        return False
    svc = app.state.service
    refusal = body = None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as e:  # a 422 like any other refusal, counted: the app's TGI routes answer it alike
        refusal = errors.validation(errors.malformed_json(raw, str(e)))
    else:
        try:
            body = TGI_MODELS[route].model_validate(parsed)  # as FastAPI validates it (python mode), from JSON
        except ValidationError:
            return False  # the app's 422, with its message
    try:
        if refusal is not None:
            raise refusal
        await not_draining(svc)  # the generation guard after the API key's, as the routes' dependencies order them
        if route == "/generate_stream" or (route == "/" and body.stream):  # not getattr: pydantic's miss is slow
            job = svc.admit(body, stream=True)
            ignored = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in ignored_headers(body).items()]
            await push_stream(job, SSEWriter(job, route, svc.metrics), SSE_RAW_HEADERS + ignored, svc.keepalive_s, receive, send)
            return True
        response = await generate.generate_once(svc, Request(scope, receive), body, route, as_list=route == "/")
    except (errors.APIError, ServiceError) as e:
        err = errors.api_error(e) if isinstance(e, ServiceError) else e
        svc.metrics.request_done(route, err.error_type)
        response = errors.error_response(err)
    await response(scope, receive, send)
    return True


async def answer_openai(app, scope: Scope, headers: Headers, raw: bytes, receive: Receive, send: Send) -> bool:
    """An OpenAI completion request (/v1/completions, /v1/chat/completions); False: the app's stack is to answer it
    (OpenAI's 400 for a body that is not JSON is the app's words)."""
    route = scope["path"]
    if not _accepted(app, headers):
        return False
    handler, model = OPENAI_HANDLERS[route]
    try:
        body = model.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError):
        return False
    svc = app.state.service
    request = Request(scope, receive)
    try:
        await not_draining(svc)
        response = await handler(svc, request, body)
    except Exception as e:  # what the app's OpenAIRoute answers for its handler: OpenAI's shape, counted
        response = openai.error_answer(svc, request, route, e)
    if isinstance(response, WrittenResponse):  # its body pushed from the engine's wake-ups, not iterated
        await push_stream(response.job, response.writer, response.raw_headers, svc.keepalive_s, receive, send)
    elif isinstance(response, StreamingResponse):
        await _stream(response.raw_headers, response.body_iterator, receive, send)
    else:
        await response(scope, receive, send)
    return True


TGI_MODELS: dict[str, type[BaseModel]] = {"/generate": GenerateRequest, "/generate_stream": GenerateRequest}
TGI_MODELS["/"] = CompatGenerateRequest
OPENAI_HANDLERS = {
    openai.COMPLETIONS: (openai.completions, CompletionRequest),
    openai.CHAT: (openai.chat_completions, ChatCompletionRequest),
}
# the routes the front door (service/http/middleware.py) offers here first
ROUTES: dict[str, Callable[..., Awaitable[bool]]] = {
    **dict.fromkeys(TGI_MODELS, answer_tgi),
    **dict.fromkeys(OPENAI_HANDLERS, answer_openai),
}


async def _stream(headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes], receive: Receive, send: Send) -> None:
    """What Starlette's StreamingResponse does (send each chunk; a disconnect cancels the body's generator,
    whose `finally` cancels the request), with one plain task listening instead of an anyio task group: for the
    streams whose body is not pushed from the engine's wake-ups (service/http/pushed.py), /v1's of several choices."""
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


def _authorized(headers: Headers, key: str | None) -> bool:
    """The API key check of service/http/dependencies.py on the raw header (the app answers the 401 when it fails)."""
    if key is None:
        return True
    scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and api_key_matches(given.strip(), key)
