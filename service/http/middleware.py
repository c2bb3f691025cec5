"""The front door: what every HTTP request goes through, written once.

`AttnserveApp` is the FastAPI app whose `__call__` is a plain ASGI layer in front of everything:

- the request id (the client's `x-request-id` when it is a sane one, else a new one) in the log context and on
  every response;
- one JSON access-log line per request;
- the body-size limit: 413 for a body over `errors.MAX_BODY_BYTES`, by Content-Length or by counting a chunked
  body, before more than the limit is held (the body is read here once and replayed to whoever answers);
- a 500 in the one error shape for an unexpected exception (the log has the details, with the request id).

Inside it, a POST to a generation route (`/generate`, `/generate_stream`, `/`, `/v1/completions`,
`/v1/chat/completions`) goes to that route's one handler (service/http/generation.py), which owns everything
from there on; FastAPI's routing, dependencies and body parsing never run for it. Everything else goes to
FastAPI's stack (its error handlers, routers and mounts), which has no layer of its own for these four jobs.
"""

from __future__ import annotations

import json
import logging
import random
import time

import orjson
from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attnserve.service.http import errors, generation
from attnserve.service.http.logs import log_line, request_id_var
from attnserve.service.http.openai import errors as openai_errors

access_log = logging.getLogger("attnserve.access")
log = logging.getLogger("attnserve.service")

NO_BODY = ("GET", "HEAD", "OPTIONS")


def request_id(sent: bytes | None) -> str:
    """The client's `x-request-id` when it is a sane one, else a new id."""
    given = (sent or b"").decode("latin-1")
    # a new id needs to be unique, not secret: uuid4 reads os.urandom, ~0.4 ms per call on some VMs
    return given if given and len(given) <= 128 and given.isprintable() else f"{random.getrandbits(128):032x}"


class AttnserveApp(FastAPI):
    """The FastAPI app behind the front door (see above)."""

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # the front door answers an unexpected exception: Starlette's outermost layer would answer it first, in its words
        return stack.app if isinstance(stack, ServerErrorMiddleware) else stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            await super().__call__(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # the first of a repeated header, as Starlette's Headers.get
        rid = request_id(headers.get(b"x-request-id"))
        rid_header = (b"x-request-id", rid.encode("latin-1"))
        context = request_id_var.set(rid)
        t0 = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), rid_header]
            await send(message)

        try:
            await self._enter(scope, headers, receive, send_with_id)
        except Exception:
            if status:  # the answer had begun: nothing more can be said on this connection
                raise
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            if scope["method"] == "POST":
                self._count(scope, "internal")
            await errors.error_response(errors.internal())(scope, receive, send_with_id)
        finally:
            log_access(scope, status, t0)
            request_id_var.reset(context)

    async def _enter(self, scope: Scope, headers: dict[bytes, bytes], receive: Receive, send: Send) -> None:
        """The body-size limit, then a generation route's handler or the app's stack."""
        scope["app"] = self
        if scope["method"] in NO_BODY:
            await super().__call__(scope, receive, send)
            return
        limit = errors.MAX_BODY_BYTES
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(scope, send)
            return
        read = await errors.read_body(receive, limit)
        if read is None:  # the client went away before sending its body
            return
        body = read[0]
        if len(body) > limit:
            await self._too_large(scope, send)
            return
        receive = errors.replaying(body, False, receive)
        route = generation.HANDLERS.get(scope["path"]) if scope["method"] == "POST" else None
        if route is not None:
            await route.answer(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def _count(self, scope: Scope, outcome: str) -> None:
        """An error answered here on a generation route counts in attnserve_requests_total, as the routes' own do."""
        svc = self.state.service
        if svc is not None and scope["path"] in generation.ROUTES:
            svc.metrics.request_done(scope["path"], outcome)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        self._count(scope, "validation")
        message = f"the request body is larger than the limit of {errors.MAX_BODY_BYTES} bytes"
        if scope["path"].startswith(openai_errors.PREFIX):  # OpenAI's shape on /v1/*
            raw = orjson.dumps(openai_errors.OpenAIError(413, message).body())
        else:
            raw = json.dumps(errors.error_body("validation", message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


def log_access(scope: Scope, status: int, t0: float) -> None:
    """The access-log line of a request that began at perf_counter() `t0`."""
    method, path = scope["method"], scope["path"]
    fields = {"method": method, "path": path, "status": status, "duration_ms": round((time.perf_counter() - t0) * 1000, 2)}
    log_line(access_log, logging.INFO, f"{method} {path} {status}", fields)
