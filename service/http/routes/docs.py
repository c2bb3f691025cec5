"""The API's documentation pages, GET /docs (Swagger UI) and GET /redoc, with every asset served from here.

FastAPI's own pages load Swagger UI and ReDoc from a CDN and the favicon from
fastapi.tiangolo.com, so on an offline machine or behind a strict proxy they
are blank. These load the same pages' scripts, style and favicon from the
`fastapi-offline` package's files (Swagger UI 5, which reads OpenAPI 3.1),
under /docs/static: no other origin.
"""

from __future__ import annotations

import importlib.resources

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/docs/static"

router = APIRouter(include_in_schema=False)


def static_files() -> StaticFiles:
    """Swagger UI's and ReDoc's files, mounted at STATIC_URL (a router cannot carry a mount)."""
    return StaticFiles(directory=str(importlib.resources.files("fastapi_offline") / "static"))


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=root + request.app.openapi_url,
        title=request.app.title + " - Swagger UI",
        swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=root + request.app.openapi_url,
        title=request.app.title + " - ReDoc",
        redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png",
        with_google_fonts=False,
    )
