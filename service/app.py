"""The HTTP API: TGI's routes and shapes over the continuous-batching scheduler.

    POST /generate         {"inputs", "parameters"} -> {"generated_text", "details"?}
    POST /generate_stream  Server-Sent Events, one per token; the last carries generated_text (+ details)
    POST /                 what huggingface_hub / text-generation clients call: "stream": false -> [one answer],
                           true -> the /generate_stream events
    GET  /health           liveness: 503 once the engine loop has died
    GET  /ready            readiness: bundle loaded and warmed up, not draining, below the request bound
    GET  /info             model id, bundle sha256, variant, provider, threads, limits
    GET  /metrics          Prometheus exposition

`create_app(settings)` builds the app; its lifespan loads the bundle once (or
takes an engine already loaded), warms it up, then starts the engine thread,
so /ready is 200 only when a request can be served at once.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.metadata
import json
import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import numpy as np
from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import errors
from service.bundle import load_bundle
from service.engine import DecodingOptions, Engine, InputError, StepResult
from service.explain import Explainer
from service.explain import install as install_explain
from service.logs import request_id_var
from service.metrics import CONTENT_TYPE, ServiceMetrics
from service.scheduler import Failed, Finished, Scheduler, Ticket
from service.schemas import (
    CompatGenerateRequest,
    Details,
    ErrorResponse,
    GenerateParameters,
    GenerateRequest,
    GenerateResponse,
    HealthResponse,
    InfoResponse,
    ReadyResponse,
    StreamResponse,
    Token,
)
from service.settings import ConfigError, Settings

log = logging.getLogger("attnserve.service")
access_log = logging.getLogger("attnserve.access")

GENERATION_ROUTES = ("/generate", "/generate_stream", "/", "/explain")  # /explain: service/explain.py
BEARER = HTTPBearer(auto_error=False, description="Required when the server has an API key (ATTNSERVE_API_KEY).")
SSE_KEEPALIVE_S = 15.0  # a comment line this often on a quiet stream keeps proxies from closing it


def load_engine(settings: Settings) -> Engine:
    """Bundle + ONNX Runtime sessions; raises BundleError / EngineError (one line) on a bad bundle or setting."""
    return Engine(load_bundle(settings.bundle), variant=settings.variant, provider=settings.provider, threads=settings.threads)


def resolve_limits(settings: Settings, engine: Engine) -> tuple[int, int]:
    """(max_input_tokens, max_new_tokens): the settings, defaulting to and capped by what the bundle allows."""
    max_input = settings.max_input_tokens or engine.max_source_len
    max_new = settings.max_new_tokens or engine.max_target_len
    if max_input > engine.max_source_len:
        raise ConfigError(f"max_input_tokens={max_input} exceeds the bundle's max_source_len={engine.max_source_len}")
    if max_new > engine.max_target_len:
        raise ConfigError(f"max_new_tokens={max_new} exceeds the bundle's max_target_len={engine.max_target_len}")
    return max_input, max_new


def warm_up(engine: Engine) -> None:
    """One greedy and one sampled generation over rows of different lengths, so the first real
    request does not pay for ONNX Runtime's first-run allocations and kernel choices."""
    first = max(engine.bundle.special_ids.values()) + 1  # the first ordinary source token
    sources = [[first], [first] * min(4, engine.max_source_len)]
    engine.generate(sources, DecodingOptions(max_new_tokens=min(4, engine.max_target_len)))
    engine.generate(sources, DecodingOptions(max_new_tokens=min(4, engine.max_target_len), do_sample=True, seed=0))


class Service:
    """Everything the routes share, built once by the lifespan."""

    def __init__(self, settings: Settings, engine: Engine, keepalive_s: float = SSE_KEEPALIVE_S):
        self.settings = settings
        self.engine = engine
        self.keepalive_s = keepalive_s
        self.max_input_tokens, self.max_new_tokens = resolve_limits(settings, engine)
        self.metrics = ServiceMetrics(engine.bundle.model_id)
        self.scheduler = Scheduler(
            engine,
            self.metrics,
            max_batch_size=settings.max_batch_size,
            max_concurrent_requests=settings.max_concurrent_requests,
            request_timeout_s=settings.request_timeout_s,
        )
        self.ready = False
        self.draining = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.explainer = Explainer.for_engine(engine)  # POST /explain's graphs; None when the bundle has none

    # ---- request -> (source ids, options) ------------------------------------------------
    def prepare(self, body: GenerateRequest, stream: bool) -> tuple[list[int], DecodingOptions, GenerateParameters]:
        """Validate a request beyond its schema; raises APIError 422 with what to fix."""
        p = body.parameters or GenerateParameters()
        unsupported = p.unsupported_parameters()
        if unsupported:
            raise errors.validation(f"parameters not supported by this server: {', '.join(unsupported)}")
        text = body.inputs
        try:
            if p.truncate is not None:
                text = self._keep_last_tokens(text, p.truncate)
            ids = self.engine.encode_text(text)
        except InputError as e:
            raise errors.validation(f"inputs: {e}") from None
        if len(ids) > self.max_input_tokens:
            raise errors.validation(
                f"inputs: input is {len(ids)} tokens long; this server accepts at most {self.max_input_tokens} "
                "(or set parameters.truncate)"
            )
        n = self.max_new_tokens if p.max_new_tokens is None else p.max_new_tokens
        if not 1 <= n <= self.max_new_tokens:
            raise errors.validation(f"parameters.max_new_tokens must be between 1 and {self.max_new_tokens}, got {n}")
        try:
            options = DecodingOptions(
                max_new_tokens=n,
                do_sample=bool(p.do_sample),
                temperature=p.temperature,
                top_k=p.top_k,
                top_p=p.top_p,
                repetition_penalty=p.repetition_penalty,
                seed=p.seed,
                stop=tuple(p.stop or ()),
                logprobs=bool(p.details) or stream,  # TGI's tokens always carry a logprob where it shows them
            )
        except InputError as e:
            raise errors.validation(f"parameters: {e}") from None
        return ids, options, p

    def _keep_last_tokens(self, text: str, n: int) -> str:
        """TGI's `truncate`: keep the last n source tokens (cut the text where the n-th from the end begins)."""
        offsets = self.engine.src_tokenizer.encode(text, add_special_tokens=False).offsets
        return text if len(offsets) <= n else text[offsets[-n][0] :]

    def admit(self, body: GenerateRequest, stream: bool) -> tuple[Ticket, GenerateParameters]:
        if self.draining:
            raise errors.draining()
        ids, options, params = self.prepare(body, stream)
        ticket = self.scheduler.submit(ids, options, self.loop)
        return ticket, params

    # ---- waiting for a ticket ---------------------------------------------------------------
    async def collect(self, request: Request, ticket: Ticket) -> tuple[list[StepResult], Finished] | None:
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


def _json(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _token(r: StepResult) -> dict:
    return {"id": r.token_id, "text": r.text, "logprob": r.logprob, "special": r.special}


def _timing_headers(ticket: Ticket, n_tokens: int) -> dict[str, str]:
    """TGI's per-response timing headers, in milliseconds."""
    t = ticket.timings()
    return {
        "x-total-time": str(round(t["total"] * 1000)),
        "x-queue-time": str(round(t["queue"] * 1000)),
        "x-inference-time": str(round(t["inference"] * 1000)),
        "x-time-per-token": str(round(t["per_token"] * 1000)),
        "x-generated-tokens": str(n_tokens),
    }


ERROR_RESPONSES = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        401: "Missing or wrong API key (`unauthorized`)",
        413: "Body larger than the limit (`validation`)",
        422: "Invalid input or parameters (`validation`)",
        429: "Queued + running requests at the bound (`overloaded`); see Retry-After",
        503: "Draining for shutdown (`draining`) or engine stopped (`unavailable`)",
        504: "Not finished within the request timeout (`timeout`)",
    }.items()
}
SSE_RESPONSE = {
    "description": "Server-Sent Events: `data:{StreamResponse}` per token; the last carries generated_text",
    "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/StreamResponse"}}},
}


def create_app(settings: Settings, engine: Engine | None = None, *, keepalive_s: float = SSE_KEEPALIVE_S) -> FastAPI:
    """The FastAPI app. `engine`: one already loaded (attnserve-serve loads it first, so a bad bundle
    stops start-up before the port opens); None: the lifespan loads `settings.bundle`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine if engine is not None else await asyncio.to_thread(load_engine, settings)
        svc = Service(settings, eng, keepalive_s)
        svc.loop = asyncio.get_running_loop()
        await asyncio.to_thread(warm_up, eng)
        svc.scheduler.start()
        app.state.service = svc
        svc.ready = True
        log.info(
            "ready",
            extra={
                "model_id": eng.bundle.model_id,
                "variant": eng.variant,
                "provider": eng.provider,
                "threads": eng.threads,
                "max_batch_size": settings.max_batch_size,
            },
        )
        try:
            yield
        finally:
            svc.ready = False
            await asyncio.to_thread(svc.scheduler.stop)

    app = FastAPI(
        title="attnserve",
        version=_version(),
        description="Greedy and sampled generation from an encoder-decoder Transformer on ONNX Runtime, "
        "in Text Generation Inference's API shapes.",
        lifespan=lifespan,
    )
    app.state.service = None
    app.state.settings = settings

    def service(request: Request) -> Service:
        svc = request.app.state.service
        if svc is None:
            raise errors.unavailable("the server is starting")
        return svc

    def count_error(request: Request, err: errors.APIError) -> None:
        svc = request.app.state.service
        if svc is not None and request.url.path in GENERATION_ROUTES and request.method == "POST":
            svc.metrics.request_done(request.url.path, err.error_type)

    def count_too_large(scope) -> None:
        svc = app.state.service
        if svc is not None and scope["path"] in GENERATION_ROUTES:
            svc.metrics.request_done(scope["path"], "validation")

    errors.install_error_handlers(app, count_error)
    app.add_middleware(errors.BodySizeLimit, on_reject=count_too_large)
    app.add_middleware(RequestContext)  # added last: outermost, so even a 413 carries x-request-id

    async def authorize(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        key = settings.api_key
        if key is None:
            return
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode(), key.encode()):
            message = "missing or wrong API key: send 'Authorization: Bearer <key>'"
            raise errors.APIError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})

    async def not_draining(request: Request) -> None:
        if service(request).draining:
            raise errors.draining()

    guards = [Depends(authorize), Depends(not_draining)]  # async: a sync dependency costs a threadpool hop per request

    async def generate_once(
        request: Request, body: GenerateRequest, route: str, response: Response
    ) -> Response | GenerateResponse:
        svc = service(request)
        ticket, params = svc.admit(body, stream=False)
        collected = await svc.collect(request, ticket)
        if collected is None:
            svc.metrics.request_done(route, "cancelled")
            return Response(status_code=499)  # nobody reads it: the client has gone
        results, finished = collected
        text = ticket.generation.text if ticket.generation is not None else ""
        if params.return_full_text:
            text = body.inputs + text
        details = None
        if params.details:
            details = Details(
                finish_reason=finished.finish_reason,
                generated_tokens=len(results),
                seed=ticket.seed,
                tokens=[Token(**_token(r)) for r in results],
            )
        svc.metrics.request_done(route, "success")
        svc.metrics.request_duration.observe(time.perf_counter() - ticket.t_arrival)
        response.headers.update(_timing_headers(ticket, len(results)))
        return GenerateResponse(generated_text=text, details=details)

    def generate_stream(request: Request, body: GenerateRequest, route: str) -> SSEResponse:
        svc = service(request)
        ticket, params = svc.admit(body, stream=True)
        return SSEResponse(
            sse_events(svc, ticket, params, body.inputs, route),
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    @app.post(
        "/generate",
        response_model=GenerateResponse,
        responses=ERROR_RESPONSES,
        dependencies=guards,
        summary="Generate text for one input",
    )
    async def generate(request: Request, body: GenerateRequest, response: Response) -> Response | GenerateResponse:
        return await generate_once(request, body, "/generate", response)

    @app.post(
        "/generate_stream",
        responses={200: SSE_RESPONSE, **ERROR_RESPONSES},
        dependencies=guards,
        response_class=SSEResponse,
        summary="Generate text for one input, streamed token by token (Server-Sent Events)",
    )
    async def generate_stream_route(request: Request, body: GenerateRequest) -> SSEResponse:
        return generate_stream(request, body, "/generate_stream")

    @app.post(
        "/",
        response_model=list[GenerateResponse],
        responses={
            200: {
                "description": "stream false: a one-element list; stream true: Server-Sent Events as /generate_stream",
                "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/StreamResponse"}}},
            },
            **ERROR_RESPONSES,
        },
        dependencies=guards,
        summary="TGI's compatibility route (what huggingface_hub's InferenceClient calls)",
    )
    async def compat(request: Request, body: CompatGenerateRequest, response: Response):
        if body.stream:
            return generate_stream(request, body, "/")
        out = await generate_once(request, body, "/", response)
        return out if isinstance(out, Response) else [out]

    @app.get("/health", response_model=HealthResponse, responses={503: {"model": ErrorResponse}}, summary="Liveness")
    async def health(request: Request) -> HealthResponse:
        svc = service(request)
        if not svc.scheduler.alive:
            raise errors.unavailable(svc.scheduler._unavailable_reason())
        return HealthResponse()

    @app.get("/ready", response_model=ReadyResponse, responses={503: {"model": ErrorResponse}}, summary="Readiness")
    async def ready(request: Request) -> ReadyResponse:
        svc = service(request)
        if svc.draining:
            raise errors.draining()
        if not svc.ready or not svc.scheduler.alive:
            raise errors.unavailable("the server is not ready: the engine is not running")
        if svc.scheduler.saturated:
            raise errors.unavailable("the server is at its bound of queued + running requests")
        return ReadyResponse()

    @app.get("/info", response_model=InfoResponse, summary="Model and server limits")
    async def info(request: Request) -> InfoResponse:
        svc = service(request)
        eng = svc.engine
        return InfoResponse(
            model_id=eng.bundle.model_id,
            model_sha=eng.bundle.sha256,
            model_dtype=str(np.dtype(eng.kv_dtype)),
            variant=eng.variant,
            provider=eng.provider,
            threads=eng.threads,
            max_batch_size=settings.max_batch_size,
            max_concurrent_requests=settings.max_concurrent_requests,
            max_input_tokens=svc.max_input_tokens,
            max_new_tokens=svc.max_new_tokens,
            request_timeout_s=settings.request_timeout_s,
            version=_version(),
        )

    @app.get("/metrics", response_class=Response, summary="Prometheus metrics", responses={200: {"content": {CONTENT_TYPE: {}}}})
    async def metrics(request: Request) -> Response:
        return Response(service(request).metrics.exposition(), media_type=CONTENT_TYPE)

    install_explain(app, guards, service, ERROR_RESPONSES)  # POST /explain and the demo page GET /demo
    # /docs must show the stream event schema even though no route returns it as JSON
    _add_schema(app, StreamResponse)
    return app


async def sse_events(svc: Service, ticket: Ticket, params: GenerateParameters, inputs: str, route: str) -> AsyncIterator[bytes]:
    """The body of a stream: `data:{event}` per token, keep-alive comments while quiet, an error event on failure.

    If the client disconnects, Starlette cancels this generator at its await;
    the `finally` then cancels the ticket, so the row leaves the batch at the
    next step and stops generating.
    """
    outcome = "cancelled"
    index = 0
    try:
        while True:
            try:
                events = await asyncio.wait_for(ticket.next_events(), svc.keepalive_s)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            for ev in events:
                if isinstance(ev, Finished):
                    return
                if isinstance(ev, Failed):
                    outcome = ev.error.error_type
                    yield b"data:" + _json(errors.error_body(ev.error.error_type, ev.error.message)) + b"\n\n"
                    return
                index += 1
                event = {"index": index, "token": _token(ev), "top_tokens": None, "generated_text": None, "details": None}
                if ev.finish_reason is not None:
                    text = ticket.generation.text
                    event["generated_text"] = inputs + text if params.return_full_text else text
                    if params.details:
                        event["details"] = {
                            "finish_reason": ev.finish_reason,
                            "generated_tokens": index,
                            "seed": ticket.seed,
                            "input_length": len(ticket.source_ids),
                        }
                    outcome = "success"
                    svc.metrics.request_duration.observe(time.perf_counter() - ticket.t_arrival)
                yield b"data:" + _json(event) + b"\n\n"
    finally:
        if outcome == "cancelled":
            ticket.cancel()
        svc.metrics.request_done(route, outcome)


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"


class RequestContext:
    """ASGI middleware: the request id (the client's `x-request-id`, else a new one) in the log context
    and on every response, and one JSON access-log line per request."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        # a new id needs to be unique, not secret: uuid4 reads os.urandom, ~0.4 ms per call on some VMs
        rid = sent if sent and len(sent) <= 128 and sent.isprintable() else f"{random.getrandbits(128):032x}"
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
            request_id_var.reset(token)


def _add_schema(app: FastAPI, model: type) -> None:
    original = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schemas = original().setdefault("components", {}).setdefault("schemas", {})  # FastAPI caches the dict
            own = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(own.pop("$defs", {}))
            schemas[model.__name__] = own
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _version() -> str:
    try:
        return importlib.metadata.version("attnserve")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
