"""ASGI middleware of the app: the request id and the access log (the body-size limit is service/http/errors.py's)."""

from __future__ import annotations

import logging
import random
import time

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.logs import request_id_var

access_log = logging.getLogger("attnserve.access")


def request_id(sent: bytes | None) -> str:
    """The client's `x-request-id` when it is a sane one, else a new id."""
    given = (sent or b"").decode("latin-1")
    # a new id needs to be unique, not secret: uuid4 reads os.urandom, ~0.4 ms per call on some VMs
    return given if given and len(given) <= 128 and given.isprintable() else f"{random.getrandbits(128):032x}"


class RequestContext:
    """ASGI middleware: the request id (the client's `x-request-id`, else a new one) in the log context
    and on every response, and one JSON access-log line per request."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(dict(scope.get("headers") or []).get(b"x-request-id"))
        token = request_id_var.set(rid)
        t0 = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)["x-request-id"] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            log_access(scope, status, t0)
            request_id_var.reset(token)


def log_access(scope: Scope, status: int, t0: float) -> None:
    """The access-log line of a request that began at perf_counter() `t0`."""
    access_log.info(
        "%s %s %s",
        scope["method"],
        scope["path"],
        status,
        extra={
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "duration_ms": round((time.perf_counter() - t0) * 1000, 2),
        },
    )
