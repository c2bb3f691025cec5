"""The HTTP API: TGI's routes and shapes over the continuous-batching scheduler.

    POST /generate         {"inputs", "parameters"} -> {"generated_text", "details"?}
    POST /generate_stream  Server-Sent Events, one per token; the last carries generated_text (+ details)
    POST /                 what huggingface_hub / text-generation clients call: "stream": false -> [one answer],
                           true -> the /generate_stream events
    POST /score            the served model's log-probabilities of given answers (teacher forcing)
    POST /explain          the cross-attention of every output token; GET /demo draws it
    GET  /health           liveness: 503 once the engine loop has died
    GET  /ready            readiness: bundle loaded and warmed up, not draining, below the request bound
    GET  /samples          a few hundred inputs of the model's own task (its bundle's parity corpus)
    GET  /info             model id, bundle sha256, variant, provider, threads, limits
    GET  /metrics          Prometheus exposition
    GET  /docs, /redoc     the API's documentation, every asset served from here (no CDN)

`create_app(settings)` only wires (after vLLM's build_app): the lifespan, the
routers (service/http/routes/), the middleware and the error handlers. Its lifespan
loads the bundle once (or takes an engine already loaded), warms it up, then
starts the engine thread, so /ready is 200 only when a request can be served
at once. Where the rest lives:

    service/http/state.py         the Service the routes share (engine, validator, scheduler, metrics)
    service/http/dependencies.py  how routes reach it, and the guards (API key, readiness, drain)
    service/http/validation.py    a TGI body's unknown and misplaced fields (the request layer validates the rest)
    service/http/errors.py        the error shape, and engine outcomes -> status codes
    service/http/responses.py     /generate's body, TGI's timing headers, the SSE stream
    service/http/middleware.py    the front door (the app class): request id, access log, body-size limit, the 500
    service/http/generation.py    the five generation routes, one handler each, called by the front door
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from attnserve.service.engine.engine import Engine
from attnserve.service.http import errors, generation
from attnserve.service.http.middleware import AttnserveApp
from attnserve.service.http.openai import routes as openai
from attnserve.service.http.routes import docs, explain, health, samples, score
from attnserve.service.http.schemas import StreamResponse
from attnserve.service.http.state import SSE_KEEPALIVE_S, Service, load_engine, load_lexicon, warm_up
from attnserve.service.settings import Settings
from attnserve.service.text import lexicon_watch
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.version import version

# net allocations between young-generation collections (Python's default 700): above what a full batch's requests and
# a deep queue hold at once (benchmarks/HISTORY.md, "Streams written from the engine's wake-ups, and no young-generation
# collections")
YOUNG_COLLECTION_THRESHOLD = 10_000

log = logging.getLogger("attnserve.service")


def create_app(
    settings: Settings, engine: Engine | None = None, *, keepalive_s: float = SSE_KEEPALIVE_S, lexicon: Lexicon | None = None
) -> FastAPI:
    """The FastAPI app. `engine`: one already loaded (attnserve-serve loads it first, so a bad bundle
    stops start-up before the port opens); None: the lifespan loads `settings.bundle`. `lexicon`: the
    bundle's lexicon with the operator's file, already loaded (None: the lifespan loads it, if any).
    `keepalive_s`: how often a quiet stream sends a keep-alive comment."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine if engine is not None else await asyncio.to_thread(load_engine, settings)
        lex = lexicon if lexicon is not None else await asyncio.to_thread(load_lexicon, settings, eng)
        svc = Service(settings, eng, keepalive_s, lexicon=lex)
        svc.loop = asyncio.get_running_loop()
        await asyncio.to_thread(warm_up, eng)
        # what is alive now (the app, the sessions, the tokenizers, the lexicon) lives as long as the server: out of
        # the collector's sight, a full collection no longer walks all of it while requests wait
        gc.freeze()
        # With Python's default (a young collection every 700 net allocations) the collector walks the objects of the
        # requests in flight several times a second, under load a few percent of the server's CPU, and finds no
        # garbage: requests leave no cycles. Past what the requests in flight hold, it runs when something accumulates.
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
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
                "lexicon_sources": len(lex) if lex is not None else 0,
                "word_level_source": eng.bundle.word_level_source,
            },
        )
        watching = start_lexicon_watch(svc)
        try:
            yield
        finally:
            svc.ready = False
            if watching is not None:
                watching.cancel()
            await asyncio.to_thread(svc.scheduler.stop)

    app = AttnserveApp(
        title="attnserve",
        version=version(),
        description="Greedy and sampled generation from an encoder-decoder Transformer on ONNX Runtime, "
        "in Text Generation Inference's API shapes.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load their assets from a CDN: service/http/routes/docs.py serves its own
        redoc_url=None,
    )
    app.state.service = None  # set by the lifespan; routes get it through attnserve.service.http.dependencies.get_service
    app.state.settings = settings

    app.router.routes.extend(generation.TGI_ROUTES)
    app.include_router(explain.router)
    app.include_router(score.router)
    app.include_router(health.router)
    app.include_router(samples.router)
    app.include_router(docs.router)
    app.mount(explain.STATIC_URL, explain.static_files(), name="demo-static")
    app.mount(docs.STATIC_URL, docs.static_files(), name="docs-static")

    errors.install_error_handlers(app, _count_error)
    app.router.routes.extend(generation.OPENAI_ROUTES)
    openai.install(app)  # /v1: OpenAI's routes, and its error shape for what routing answers on /v1/*
    # /docs must show the stream event schema even though no route returns it as JSON
    _add_schema(app, StreamResponse)
    return app


def start_lexicon_watch(svc: Service) -> asyncio.Task | None:
    """Read the operator's lexicon file again when it changes or on SIGHUP (service/text/lexicon_watch.py); None when
    there is no such file."""
    if svc.lexicon is None or svc.lexicon.override_file is None:
        return None
    reload_now = asyncio.Event()
    lexicon_watch.on_sighup(asyncio.get_running_loop(), reload_now)
    return asyncio.ensure_future(lexicon_watch.watch(lexicon_watch.LexiconWatcher(svc.lexicon), svc.use_lexicon, reload_now))


def _count_error(request: Request, err: errors.APIError) -> None:
    """An error answered on a generation route counts in attnserve_requests_total under its error_type."""
    svc: Service | None = request.app.state.service
    if svc is not None and request.url.path in generation.ROUTES and request.method == "POST":
        svc.metrics.request_done(request.url.path, err.error_type)


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
