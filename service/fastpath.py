"""The generation routes' common case without FastAPI's request machinery (issue 14).

Under load the event loop spent more CPU per request than the engine's own decoding, most of
it in FastAPI and Starlette around a handler that does little: routing, dependency
resolution, exception-middleware layers and body parsing. `GenerationFastPath` is pure ASGI
middleware that answers a well-formed `POST /generate`, `/generate_stream` or `/` itself with
the very handlers of service/routes/generate.py. Anything else goes on to the FastAPI app
unchanged, and so does any request the fast path would have to refuse before its job is
queued (no service yet, draining, wrong API key, a body that is not JSON or does not
validate): the app then answers it exactly as before (same status, error body and metrics).
The routes stay declared in the app, so /docs and the OpenAPI schema do not change.

Errors after admission (422/429/503 from the scheduler, 504 on timeout) are answered here
with service.errors' one shape and counted in the metrics, as the app's handler does.
"""

from __future__ import annotations

import asyncio

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import errors
from service.dependencies import api_key_matches
from service.routes import generate
from service.schemas import CompatGenerateRequest, GenerateRequest

ROUTES = {"/generate": GenerateRequest, "/generate_stream": GenerateRequest, "/": CompatGenerateRequest}


class GenerationFastPath:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = ROUTES.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        svc = scope["app"].state.service if model is not None else None
        if svc is None or svc.draining:
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # the first of a repeated header, as Starlette's Headers.get
        json_body = headers.get(b"content-type", b"").split(b";")[0].strip().lower() == b"application/json"
        if not json_body or not _authorized(headers, svc.settings.api_key):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before sending its body
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()  # after the body: http.disconnect when the client goes away

        try:
            body = model.model_validate(orjson.loads(raw))  # as FastAPI validates it (python mode), from JSON
        except (orjson.JSONDecodeError, ValidationError):
            await self.app(scope, replay, send)  # the app's 422, with its message
            return
        route = scope["path"]
        try:
            if route == "/generate_stream" or getattr(body, "stream", False):
                response = generate.stream(svc, body, route)
            else:
                response = await generate.generate_once(svc, Request(scope, replay), body, route, as_list=route == "/")
        except errors.APIError as err:
            svc.metrics.request_done(route, err.error_type)
            response = errors.error_response(err)
        if isinstance(response, generate.SSEResponse):
            await _stream(response, replay, send)
        else:
            await response(scope, replay, send)


async def _stream(response: generate.SSEResponse, receive: Receive, send: Send) -> None:
    """What Starlette's StreamingResponse does (send each chunk; a disconnect cancels the body's generator,
    whose `finally` cancels the request), with one plain task listening instead of an anyio task group."""
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
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
    body = response.body_iterator
    try:
        async for chunk in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
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
    """The API key check of service/dependencies.py on the raw header (the app answers the 401 when it fails)."""
    if key is None:
        return True
    scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and api_key_matches(given.strip(), key)
