"""What routes depend on: the Service, and the guards of the generation routes (API key, not draining)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service import errors
from service.state import Service

BEARER = HTTPBearer(auto_error=False, description="Required when the server has an API key (ATTNSERVE_API_KEY).")


async def get_service(request: Request) -> Service:
    """The app's Service; 503 `unavailable` until the lifespan has built it. (async: a sync dependency
    costs a threadpool hop per request)"""
    svc = request.app.state.service
    if svc is None:
        raise errors.unavailable("the server is starting")
    return svc


ServiceDep = Annotated[Service, Depends(get_service)]


async def authorize(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
    """401 unless the request carries the server's API key (when it has one)."""
    key = request.app.state.settings.api_key
    if key is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), key.encode()):
        message = "missing or wrong API key: send 'Authorization: Bearer <key>'"
        raise errors.APIError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


async def not_draining(svc: ServiceDep) -> None:
    if svc.draining:
        raise errors.draining()


# Every generation route: auth first (an unauthenticated client learns nothing about its body), then drain.
GENERATION_GUARDS = [Depends(authorize), Depends(not_draining)]
