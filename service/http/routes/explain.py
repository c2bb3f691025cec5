"""POST /explain (a request's cross-attention) and the demo page that draws it (GET /demo, its files under /demo/static;
a browser's GET / is sent there)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnserve.service.engine.explain import DeadlinePassed
from attnserve.service.errors import InvalidRequest
from attnserve.service.http import errors
from attnserve.service.http.dependencies import GENERATION_GUARDS, ServiceDep
from attnserve.service.http.explain_schemas import ExplainResponse, explanation_response
from attnserve.service.http.responses import ERROR_RESPONSES
from attnserve.service.http.schemas import ErrorResponse, GenerateRequest
from attnserve.service.http.validation import tgi_request
from attnserve.service.requests import request as internal
from attnserve.service.requests.validation import ValidRequest, validate
from attnserve.service.text.options import ReadingOptions

ROUTE = "/explain"
STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
STATIC_URL = "/demo/static"
# The demo page may load only what this server serves: no CDN, no other origin.
DEMO_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
NOT_IMPLEMENTED = errors.APIError(
    501,
    "not_implemented",
    "this server's model bundle has no explain graph (decoder.explain.onnx); rebuild it with attnserve-export build",
)

router = APIRouter()


@router.post(
    ROUTE,
    response_model=ExplainResponse,
    responses={**ERROR_RESPONSES, 501: {"model": ErrorResponse, "description": "The bundle has no explain graph"}},
    dependencies=GENERATION_GUARDS,
    summary="Generate for one input and return the cross-attention of every output token",
)
async def explain(svc: ServiceDep, body: GenerateRequest) -> ExplainResponse:
    explainer = svc.explainer
    if explainer is None:
        raise NOT_IMPLEMENTED
    valid = explain_request(svc, body)
    settings = svc.settings
    if explainer.in_flight >= settings.max_concurrent_requests:
        raise errors.overloaded(explainer.retry_after_s(explainer.in_flight))
    t_arrival = time.perf_counter()
    deadline = t_arrival + settings.request_timeout_s
    explainer.in_flight += 1
    try:
        x = await asyncio.to_thread(explainer.explain, valid.units[0].source_ids, valid.request.decoding, deadline)
    except DeadlinePassed:
        raise errors.timeout(settings.request_timeout_s) from None
    finally:
        explainer.in_flight -= 1
    m = svc.metrics
    m.input_tokens.observe(len(valid.units[0].source_ids))
    m.generated_tokens.observe(len(x.token_ids))
    m.generated_tokens_total.inc(len(x.token_ids))
    m.request_done(ROUTE, "success")
    m.request_duration.observe(time.perf_counter() - t_arrival)
    prefix = body.inputs if valid.request.output.return_full_text else ""
    return explanation_response(x, svc.engine, explainer.graph, prefix)


@router.get("/demo", include_in_schema=False)
async def demo() -> Response:
    return FileResponse(STATIC_DIR / "demo.html", media_type="text/html", headers=PAGE_HEADERS)


@router.get("/", include_in_schema=False)
async def root(request: Request) -> Response:
    """`/` is TGI's POST route; a browser that opens it (Accept: text/html) is sent to the demo page."""
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/demo", status_code=307)
    raise StarletteHTTPException(405, headers={"Allow": "POST"})  # the error handler's method_not_allowed, as before


PAGE_HEADERS = {"content-security-policy": DEMO_CSP, "cache-control": "no-cache", "x-content-type-options": "nosniff"}


def static_files() -> StaticFiles:
    """The demo page's script and style, mounted at STATIC_URL (a router cannot carry a mount)."""
    return StaticFiles(directory=STATIC_DIR)


def explain_request(svc, body: GenerateRequest) -> ValidRequest:
    """/generate's validation (the one validator), for one answer: the input is read as /generate reads it (same
    messages; a word-level bundle explains one word); best_of and num_beams are refused."""

    def one_word(units: list) -> None:
        if len(units) != 1:
            raise InvalidRequest(f"/explain shows one word's attention; this text has {len(units)} words", "inputs")
        # /generate reads a word longer than the model in parts; one attention map cannot show parts
        svc.requests.check_length(units[0])

    asked = tgi_request(body, False, svc.validator)
    # /explain reads the input whole and answers in the model's own form: only truncation and the input in front apply
    reading = ReadingOptions(truncate=asked.reading.truncate)
    output = internal.OutputOptions(return_full_text=asked.output.return_full_text)
    valid = validate(svc.requests, internal.Request(body.inputs, asked.decoding, reading, output), one_word)
    if not valid.request.decoding.streams:
        raise InvalidRequest("/explain decodes one answer; best_of and num_beams are for /generate", "parameters")
    return valid
