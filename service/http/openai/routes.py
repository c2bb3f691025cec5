"""OpenAI's routes: POST /v1/completions and POST /v1/chat/completions (what they answer: `completions`,
`chat_completions`, mounted and guarded as generation routes by service/http/generation.py), GET /v1/models.

Their errors are OpenAI's shape (service/http/openai/errors.py): `error_answer` answers whatever a route, its guards
(API key, drain) or its body's validation raise, and counts it in the metrics under the route's own `route` label
with the project's `error_type` as `outcome`; `OpenAIRoute` calls it for /v1/models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnserve.service.errors import ServiceError
from attnserve.service.http import errors
from attnserve.service.http.dependencies import ServiceDep, authorize
from attnserve.service.http.openai import choices, shapes, streaming
from attnserve.service.http.openai import completions as c
from attnserve.service.http.openai.errors import OpenAIError, OpenAIErrorShape, from_error, param_table
from attnserve.service.http.openai.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    OpenAIErrorResponse,
)
from attnserve.service.http.responses import SSE_HEADERS, SSEResponse, WrittenResponse
from attnserve.service.http.state import Service

log = logging.getLogger("attnserve.service")

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
MODELS = "/v1/models"
ROUTES = (COMPLETIONS, CHAT)  # generation routes: their outcomes count in attnserve_requests_total
TAGS = ["OpenAI-compatible"]

ERRORS = {
    code: {"model": OpenAIErrorResponse, "description": text}
    for code, text in {
        400: "Invalid parameters; `param` names the field",
        401: "Missing or wrong API key",
        404: "No such model (`code`: model_not_found)",
        413: "Body larger than the limit",
        429: "Queued + running requests at the bound (`code`: overloaded); see Retry-After",
        503: "Draining for shutdown or engine stopped",
        504: "Not finished within the request timeout",
    }.items()
}
SSE_DOC = {
    "description": "stream true: Server-Sent Events `data: {chunk}`, then `data: [DONE]`",
    "content": {"text/event-stream": {}},
}


class OpenAIRoute(APIRoute):
    """A route whose errors, its dependencies' and its body validation's included, are answered in OpenAI's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        path = self.path

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as e:
                return error_answer(request.app.state.service, request, path, e)

        return route


def error_answer(svc, request: Request, path: str, e: Exception) -> Response:
    """What a route, its guards or its body's validation raised, in OpenAI's shape, counted under the route (the
    generation routes' handler, service/http/generation.py, and `OpenAIRoute` answer with it); call it inside the
    `except`."""
    if isinstance(e, (OpenAIError, errors.APIError, ServiceError, RequestValidationError)):
        err = from_error(e, param_table("messages" if path == CHAT else "prompt"))
    elif isinstance(e, StarletteHTTPException):  # FastAPI's own refusals (a body it cannot parse)
        detail = e.detail if isinstance(e.detail, str) else "invalid request"
        if e.status_code == 400 and detail == "There was an error parsing the body":  # not UTF-8, nested too deep
            detail = "the request body is not valid JSON: not UTF-8, or nested too deeply"
        err = OpenAIError(e.status_code, detail, outcome="validation" if e.status_code < 500 else "internal")
    else:  # nothing about the code to the client; the log has it, with the request id
        log.exception("unexpected error on %s %s", request.method, path)
        err = OpenAIError(500, "internal server error; the server log has the details", outcome="internal")
    if svc is not None and path in ROUTES:
        svc.metrics.request_done(path, err.outcome)
    return err.response()


router = APIRouter(route_class=OpenAIRoute, responses=ERRORS, tags=TAGS)


def json_answer(body: dict, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)


async def completions(svc: Service, request: Request, body: CompletionRequest) -> Response:
    """/v1/completions' answer: whole, or a stream to push (WrittenResponse) or to iterate."""
    planned = c.completion_request(svc, body)
    return await answer(
        svc,
        request,
        planned,
        COMPLETIONS,
        "cmpl",
        "text_completion",
        shapes.completion_body,
        shapes.CompletionChunks,
        body,
    )


async def chat_completions(svc: Service, request: Request, body: ChatCompletionRequest) -> Response:
    """/v1/chat/completions' answer, as `completions`'."""
    planned = c.chat_request(svc, body)
    return await answer(
        svc, request, planned, CHAT, "chatcmpl", "chat.completion.chunk", shapes.chat_body, shapes.ChatChunks, body
    )


async def answer(
    svc, request: Request, planned: c.Plan, route: str, prefix: str, chunk_object: str, body, renderer, sent=None
) -> Response:
    """Admit a planned completion and answer it, whole or streamed; `sent`: the request body (its ignored fields are
    named in a response header)."""
    jobs = c.admit(svc, planned)
    ignored = (c.ignored_headers(sent) if sent is not None else {}) | choices.warnings_headers(jobs)
    if planned.stream:
        envelope = {
            "id": c.new_id(prefix),
            "object": chunk_object,
            "created": int(time.time()),
            "model": c.served_model_name(svc),
        }
        if len(jobs) == 1 and len(jobs[0]) == 1:  # one choice (the common case): a body pushed from the engine's wake-ups
            writer = streaming.OneChoiceWriter(svc, planned, jobs, route, envelope, renderer(planned))
            return WrittenResponse(jobs[0][0], writer, svc.keepalive_s, SSE_HEADERS | ignored)
        events = streaming.stream_answer(svc, planned, jobs, route, envelope, renderer(planned))
        return SSEResponse(events, headers=SSE_HEADERS | ignored)
    done = await c.answer_whole(svc, request, planned, jobs, prefix)
    if done is None:
        svc.metrics.request_done(route, "cancelled")
        return Response(status_code=499)  # nobody reads it: the client has gone
    svc.metrics.request_done(route, "success")
    svc.metrics.request_duration.observe(time.perf_counter() - jobs[0][0].t_arrival)
    return json_answer(body(done, planned), ignored)


@router.get(MODELS, response_model=ModelList, dependencies=[Depends(authorize)], summary="OpenAI's model list: the served model")
async def models(svc: ServiceDep, request: Request) -> ModelList:
    created = request.app.state.openai_created
    return ModelList(data=[ModelCard(id=c.served_model_name(svc), created=created, family=svc.engine.family)])


def install(app: FastAPI) -> None:
    """The /v1 routes, and OpenAI's error shape for what is answered on /v1/* before a route runs (the body-size
    limit, unknown paths): call it after the body-size limit's middleware is added, so that it wraps it."""
    app.state.openai_created = int(time.time())
    app.include_router(router)
    app.add_middleware(OpenAIErrorShape)
