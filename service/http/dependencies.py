"""What routes depend on: the Service, and the guards of the generation routes (API key, not draining).

Each guard is written once, as a plain function: FastAPI's routes (/score, /explain, /v1/models) reach it through
their dependencies, and the generation routes' handler (service/http/generation.py) calls it itself, in the same order.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from attnserve.service.http import errors
from attnserve.service.http.state import Service

BEARER = HTTPBearer(auto_error=False, description="Required when the server has an API key (ATTNSERVE_API_KEY).")


def service_of(app) -> Service:
    """The app's Service; 503 `unavailable` until the lifespan has built it."""
    svc = app.state.service
    if svc is None:
        raise errors.unavailable("the server is starting")
    return svc


async def get_service(request: Request) -> Service:
    """`service_of` as a dependency. (async: a sync dependency costs a threadpool hop per request)"""
    return service_of(request.app)


ServiceDep = Annotated[Service, Depends(get_service)]


def api_key_matches(given: str, key: str | None) -> bool:
    """Whether a bearer token is the server's API key (any token when it has none); constant time."""
    return key is None or hmac.compare_digest(given.encode(), key.encode())


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` header's value; "" for any other scheme or none (as FastAPI's
    HTTPBearer reads it)."""
    scheme, _, given = authorization.partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


def check_api_key(given: str, key: str | None) -> None:
    """401 `unauthorized` unless `given` (a bearer token) is the server's API key (when it has one)."""
    if not api_key_matches(given, key):
        message = "missing or wrong API key: send 'Authorization: Bearer <key>'"
        raise errors.APIError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


async def authorize(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
    """`check_api_key` as a dependency."""
    check_api_key(credentials.credentials if credentials is not None else "", request.app.state.settings.api_key)


def check_not_draining(svc: Service) -> None:
    """503 `draining` once SIGTERM has begun the drain: the one check of it for new generation requests."""
    if svc.draining:
        raise errors.draining()


async def not_draining(svc: ServiceDep) -> None:
    """`check_not_draining` as a dependency."""
    check_not_draining(svc)


# Every generation route: auth first (an unauthenticated client learns nothing about its body), then drain.
GENERATION_GUARDS = [Depends(authorize), Depends(not_draining)]
