"""What routes depend on: the Service, and the guards of the generation routes (API key, not draining)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.http import errors
from service.http.state import Service

BEARER = HTTPBearer(auto_error=False, description="Required when the server has an API key (ATTNSERVE_API_KEY).")


async def get_service(request: Request) -> Service:
    """The app's Service; 503 `unavailable` until the lifespan has built it. (async: a sync dependency
    costs a threadpool hop per request)"""
    svc = request.app.state.service
    if svc is None:
        raise errors.unavailable("the server is starting")
    return svc


ServiceDep = Annotated[Service, Depends(get_service)]


def api_key_matches(given: str, key: str | None) -> bool:
    """Whether a bearer token is the server's API key (any token when it has none); constant time.
    The one check: `authorize` and the generation fast path (service/http/fastpath.py) both call it."""
    return key is None or hmac.compare_digest(given.encode(), key.encode())


async def authorize(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
    """401 unless the request carries the server's API key (when it has one)."""
    given = credentials.credentials if credentials is not None else ""
    if not api_key_matches(given, request.app.state.settings.api_key):
        message = "missing or wrong API key: send 'Authorization: Bearer <key>'"
        raise errors.APIError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


async def not_draining(svc: ServiceDep) -> None:
    """503 `draining` once SIGTERM has begun the drain: the one check of it for new generation requests (the
    routes' guard, and the fast path, service/http/fastpath.py, which calls it in the same order)."""
    if svc.draining:
        raise errors.draining()


# Every generation route: auth first (an unauthenticated client learns nothing about its body), then drain.
GENERATION_GUARDS = [Depends(authorize), Depends(not_draining)]
