"""Generation: POST /generate, POST /generate_stream and TGI's POST / (what huggingface_hub calls).

What a request becomes (the lexicon's answers, running text's words, the engine's tickets) is
service/requests/frontend.py's; these handlers only wait and answer.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from service.http import errors
from service.http.dependencies import GENERATION_GUARDS, ServiceDep
from service.http.responses import (
    ERROR_RESPONSES,
    SSE_CONTENT,
    SSE_HEADERS,
    SSE_RESPONSE,
    SSEResponse,
    disconnect_watch,
    generate_response,
    json_response,
    sse_events,
    timing_headers,
)
from service.http.schemas import CompatGenerateRequest, GenerateRequest, GenerateResponse
from service.http.state import Service
from service.http.validation import ignored_headers

router = APIRouter(dependencies=GENERATION_GUARDS, responses=ERROR_RESPONSES, route_class=errors.JSONBodyRoute)


@router.post("/generate", response_model=GenerateResponse, summary="Generate text for one input")
async def generate(svc: ServiceDep, request: Request, body: GenerateRequest) -> Response:
    return await generate_once(svc, request, body, "/generate")


@router.post(
    "/generate_stream",
    responses={200: SSE_RESPONSE},
    response_class=SSEResponse,
    summary="Generate text for one input, streamed token by token (Server-Sent Events)",
)
async def generate_stream_route(svc: ServiceDep, body: GenerateRequest) -> SSEResponse:
    return stream(svc, body, "/generate_stream")


@router.post(
    "/",
    response_model=list[GenerateResponse],
    responses={
        200: {
            "description": "stream false: a one-element list; stream true: Server-Sent Events as /generate_stream",
            "content": SSE_CONTENT,
        }
    },
    summary="TGI's compatibility route (what huggingface_hub's InferenceClient calls)",
)
async def compat(svc: ServiceDep, request: Request, body: CompatGenerateRequest) -> Response:
    if body.stream:
        return stream(svc, body, "/")
    return await generate_once(svc, request, body, "/", as_list=True)


async def generate_once(svc: Service, request: Request, body: GenerateRequest, route: str, as_list: bool = False) -> Response:
    """Admit, wait for every token, answer GenerateResponse (TGI's `/` answers a one-element list of it)."""
    job = svc.admit(body, stream=False)
    if not await job.collect(disconnect_watch(request)):
        svc.metrics.request_done(route, "cancelled")
        return Response(status_code=499)  # nobody reads it: the client has gone
    answer = generate_response(job)
    svc.metrics.request_done(route, "success")
    svc.metrics.request_duration.observe(time.perf_counter() - job.t_arrival)
    headers = timing_headers(job.timings(), job.n_tokens()) | ignored_headers(body)
    return json_response([answer] if as_list else answer, headers)


def stream(svc: Service, body: GenerateRequest, route: str) -> SSEResponse:
    job = svc.admit(body, stream=True)
    return SSEResponse(sse_events(job, route, svc.metrics, svc.keepalive_s), headers=SSE_HEADERS | ignored_headers(body))
