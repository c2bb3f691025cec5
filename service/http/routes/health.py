"""Operations: GET /health (liveness), /ready (readiness), /info (model and limits), /metrics (Prometheus)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi import APIRouter, Response

from attnserve.service.engine.bundle import VARIANT_WEIGHT_DTYPES
from attnserve.service.http import errors
from attnserve.service.http.dependencies import ServiceDep
from attnserve.service.http.schemas import ContextInfo, ErrorResponse, HealthResponse, InfoResponse, LexiconInfo, ReadyResponse
from attnserve.service.metrics import CONTENT_TYPE
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.version import version

router = APIRouter()


@router.get("/health", response_model=HealthResponse, responses={503: {"model": ErrorResponse}}, summary="Liveness")
async def health(svc: ServiceDep) -> HealthResponse:
    if not svc.scheduler.alive:
        raise errors.unavailable(svc.scheduler.unavailable_reason())
    return HealthResponse()


@router.get("/ready", response_model=ReadyResponse, responses={503: {"model": ErrorResponse}}, summary="Readiness")
async def ready(svc: ServiceDep) -> ReadyResponse:
    if svc.draining:
        raise errors.draining()
    if not svc.ready or not svc.scheduler.alive:
        raise errors.unavailable("the server is not ready: the engine is not running")
    if svc.scheduler.saturated:
        raise errors.unavailable("the server is at its bound of queued + running requests")
    return ReadyResponse()


@router.get("/info", response_model=InfoResponse, summary="Model and server limits")
async def info(svc: ServiceDep) -> InfoResponse:
    eng, settings = svc.engine, svc.settings
    return InfoResponse(
        model_id=eng.bundle.model_id,
        model_sha=eng.bundle.sha256,
        family=eng.family,
        # a variant of another name: the float type its KV cache is kept in
        model_dtype=VARIANT_WEIGHT_DTYPES.get(eng.variant, str(np.dtype(eng.kv_dtype))),
        variant=eng.variant,
        kv_cache=eng.kv_cache,
        kv_cache_bytes_per_row=eng.kv_cache_bytes_per_row,
        kv_cache_bytes_at_max_batch_size=eng.kv_cache_bytes_per_row * settings.max_batch_size,
        provider=eng.provider,
        threads=eng.threads,
        max_batch_size=settings.max_batch_size,
        max_concurrent_requests=settings.max_concurrent_requests,
        max_input_tokens=svc.max_input_tokens,
        max_new_tokens=svc.max_new_tokens,
        max_best_of=settings.max_best_of,
        max_top_n_tokens=settings.max_top_n_tokens,
        word_level_source=eng.bundle.word_level_source,
        lexicon=lexicon_info(svc.lexicon),
        context=ContextInfo(**svc.requests.context.info()) if svc.requests.context is not None else None,
        max_text_chars=settings.max_text_chars,
        max_words=settings.max_words,
        request_timeout_s=settings.request_timeout_s,
        keepalive_timeout_s=settings.keepalive_timeout_s,
        stream_interval_ms=settings.stream_interval_ms,
        version=version(),
    )


def lexicon_info(lexicon: Lexicon | None) -> LexiconInfo | None:
    """What /info shows of the lexicon: counts and file names (no directories)."""
    if lexicon is None:
        return None
    info = lexicon.info()
    if info["override_file"] is not None:
        info["override_file"] = Path(info["override_file"]).name
    return LexiconInfo(**info)


@router.get("/metrics", response_class=Response, summary="Prometheus metrics", responses={200: {"content": {CONTENT_TYPE: {}}}})
async def metrics(svc: ServiceDep) -> Response:
    return Response(svc.metrics.exposition(), media_type=CONTENT_TYPE)
