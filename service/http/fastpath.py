"""The generation routes' common case without FastAPI's request machinery.

Under load the event loop spent more CPU per request than the engine's own decoding, most of
it around a handler that does little: FastAPI's and Starlette's middleware layers (error
telemetry, body limits, exception handling), routing, dependency resolution and body
parsing. `AttnserveApp` is the FastAPI app with one difference: a `POST /generate`,
`/generate_stream` or `/` goes first to `answer_generation`, which answers a well-formed one
itself with the very handlers of service/http/routes/generate.py, and does what the middleware
does for it (the request id, the access-log line, the body-size limit, a 500 for the
unexpected). Anything else goes through the app's whole stack unchanged, and so does any
request the fast path would have to refuse before it has a valid body (no service yet, wrong
API key, a body too large, JSON that does not validate): the app answers it as it answers any
request (same status, error body, headers and metrics). The routes stay declared in the app,
so /docs and the OpenAPI schema do not change.

A body that is not JSON at all (not UTF-8, nested too deep, NaN or Infinity: `errors.malformed_json`)
is a 422 `validation` here, where the app's parser would answer some of them 400. A valid
request to a draining server, and errors of admission (the text layer's and the
scheduler's refusals, a timeout), are answered here with service/http/errors.py's shape and
status codes, and counted in the metrics, as the app's handlers do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import orjson
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from service.errors import ServiceError
from service.http import errors
from service.http.dependencies import api_key_matches, not_draining
from service.http.logs import request_id_var
from service.http.middleware import log_access, request_id
from service.http.responses import SSE_HEADERS, LastChunk, SSEResponse, sse_events
from service.http.routes import generate
from service.http.schemas import CompatGenerateRequest, GenerateRequest
from service.http.validation import ignored_headers

ROUTES = {"/generate": GenerateRequest, "/generate_stream": GenerateRequest, "/": CompatGenerateRequest}

log = logging.getLogger("attnserve.service")

# a stream's response headers, as the /generate_stream route's SSEResponse sends them (built once: Starlette's
# StreamingResponse costs about as much to make as the rest of a stream's start)
SSE_RAW_HEADERS = SSEResponse(iter(()), headers=SSE_HEADERS).raw_headers


class AttnserveApp(FastAPI):
    """The FastAPI app, whose generation routes' common case skips the middleware stack (see above)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in ROUTES:
            scope["app"] = self
            await answer_generation(scope, receive, send, super().__call__)
        else:
            await super().__call__(scope, receive, send)


async def answer_generation(scope: Scope, receive: Receive, send: Send, app) -> None:
    """Answer a generation request, or hand it to `app` (the whole stack) untouched when it must be refused."""
    model = ROUTES[scope["path"]]
    svc = scope["app"].state.service
    if svc is None:
        await app(scope, receive, send)
        return
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name, value)  # the first of a repeated header, as Starlette's Headers.get
    content_type = headers.get(b"content-type")  # none: read as JSON, as FastAPI reads it
    json_body = content_type is None or content_type.split(b";")[0].strip().lower() == b"application/json"
    declared = headers.get(b"content-length", b"0")
    too_large = declared.isdigit() and int(declared) > errors.MAX_BODY_BYTES
    if not json_body or too_large or not _authorized(headers, svc.settings.api_key):
        await app(scope, receive, send)
        return
    read = await errors.read_body(receive, errors.MAX_BODY_BYTES)
    if read is None:  # the client went away before sending its body
        return
    raw, more = read
    replay = errors.replaying(raw, more, receive)
    if len(raw) > errors.MAX_BODY_BYTES:  # a chunked body past the limit: the app's BodySizeLimit answers 413
        await app(scope, replay, send)
        return
    refusal = None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as e:  # answered here: the app's JSON parser would call some of these a 400
        refusal = errors.validation(errors.malformed_json(raw, str(e)))
    else:
        try:
            body = model.model_validate(parsed)  # as FastAPI validates it (python mode), from JSON
        except ValidationError:
            await app(scope, replay, send)  # the app's 422, with its message
            return

    # from here on the request is this path's: what RequestContext and the error handlers do for the app
    rid = request_id(headers.get(b"x-request-id"))
    context = request_id_var.set(rid)
    t0 = time.perf_counter()
    route = scope["path"]
    status = 0
    try:
        try:
            await not_draining(svc)  # the generation guard after the API key's, as the routes' dependencies order them
            if refusal is not None:  # a body that is not JSON: a 422 like any other refusal, counted and logged
                raise refusal
            if route == "/generate_stream" or (route == "/" and body.stream):  # not getattr: pydantic's miss is slow
                job = svc.admit(body, stream=True)
                status = 200
                headers = [*SSE_RAW_HEADERS, (b"x-request-id", rid.encode("latin-1"))]
                headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in ignored_headers(body).items()]
                await _stream(headers, sse_events(job, route, svc.metrics, svc.keepalive_s), replay, send)
                return
            response = await generate.generate_once(svc, Request(scope, replay), body, route, as_list=route == "/")
        except (errors.APIError, ServiceError) as e:
            if status:  # (a stream's errors after its start are events in its body)
                raise
            err = errors.api_error(e) if isinstance(e, ServiceError) else e
            svc.metrics.request_done(route, err.error_type)
            response = errors.error_response(err)
        status = response.status_code
        response.raw_headers.append((b"x-request-id", rid.encode("latin-1")))
        await response(scope, replay, send)
    except Exception:
        if status:  # the answer had begun: nothing more can be said on this connection
            raise
        log.exception("unexpected error on %s %s", scope["method"], route)
        svc.metrics.request_done(route, "internal")
        status = 500
        response = errors.error_response(errors.internal())
        response.raw_headers.append((b"x-request-id", rid.encode("latin-1")))
        await response(scope, replay, send)
    finally:
        log_access(scope, status, t0)
        request_id_var.reset(context)


async def _stream(headers: list[tuple[bytes, bytes]], body: AsyncIterator[bytes], receive: Receive, send: Send) -> None:
    """What Starlette's StreamingResponse does (send each chunk; a disconnect cancels the body's generator,
    whose `finally` cancels the request), with one plain task listening instead of an anyio task group,
    and no response object: its headers are the same for every stream (SSE_RAW_HEADERS)."""
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


def _authorized(headers: dict[bytes, bytes], key: str | None) -> bool:
    """The API key check of service/http/dependencies.py on the raw header (the app answers the 401 when it fails)."""
    if key is None:
        return True
    scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and api_key_matches(given.strip(), key)
