"""Generation: POST /generate, POST /generate_stream and TGI's POST / (what huggingface_hub calls)."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request, Response

from service.dependencies import GENERATION_GUARDS, ServiceDep
from service.engine import StepResult
from service.responses import (
    ERROR_RESPONSES,
    SSE_CONTENT,
    SSE_HEADERS,
    SSE_RESPONSE,
    SSEResponse,
    generate_response,
    json_response,
    sse_events,
    timing_headers,
)
from service.scheduler import Failed, Finished, Ticket
from service.schemas import CompatGenerateRequest, GenerateRequest, GenerateResponse
from service.state import Service

router = APIRouter(dependencies=GENERATION_GUARDS, responses=ERROR_RESPONSES)


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
    ticket, valid = svc.admit(body, stream=False)
    collected = await collect(request, ticket)
    if collected is None:
        svc.metrics.request_done(route, "cancelled")
        return Response(status_code=499)  # nobody reads it: the client has gone
    results, finished = collected
    answer = generate_response(svc.engine, ticket, results, finished, valid.parameters, body.inputs)
    svc.metrics.request_done(route, "success")
    svc.metrics.request_duration.observe(time.perf_counter() - ticket.t_arrival)
    return json_response([answer] if as_list else answer, timing_headers(ticket, ticket.n_tokens))


def stream(svc: Service, body: GenerateRequest, route: str) -> SSEResponse:
    ticket, valid = svc.admit(body, stream=True)
    events = sse_events(svc.engine, ticket, valid.parameters, body.inputs, route, svc.metrics, svc.keepalive_s)
    return SSEResponse(events, headers=SSE_HEADERS)


async def collect(request: Request, ticket: Ticket) -> tuple[list[StepResult], Finished] | None:
    """All of a ticket's tokens; None if the client went away first (the row is then cancelled)."""

    async def tokens() -> tuple[list[StepResult], Finished]:
        got: list[StepResult] = []
        while True:
            for ev in await ticket.next_events():
                if isinstance(ev, Failed):
                    raise ev.error
                if isinstance(ev, Finished):
                    return got, ev
                got.append(ev)

    work = asyncio.ensure_future(tokens())
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        finished = work.done()
        if not finished:  # the client went away (or this handler was cancelled): free the row
            work.cancel()
            ticket.cancel()
    return work.result() if finished else None


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (the body has been read, so the next message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
