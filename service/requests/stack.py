"""The service stack, built in one place: an engine's scheduler, its request layer (with the lexicon and the reader of
running text) and the limits every front end compares a request with.

The HTTP service (service/http/state.py `Service`) and the in-process client (service/client.py `Generator`) both
build theirs here, so what answers a request is the same objects in the same arrangement; they differ only in their
limits (the server refuses what is over its settings; the in-process client's callers wait instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnserve.service.engine.engine import Engine
from attnserve.service.engine.scheduler import Scheduler
from attnserve.service.metrics import ServiceMetrics
from attnserve.service.requests.frontend import RequestLayer
from attnserve.service.requests.validation import Limits
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.text.reader import MAX_TEXT_CHARS, MAX_WORDS


@dataclass
class Stack:
    """What answers requests, from the scheduler up: every front end's."""

    engine: Engine
    metrics: ServiceMetrics
    scheduler: Scheduler
    requests: RequestLayer  # the request layer (service/requests/frontend.py)
    limits: Limits


def build_stack(
    engine: Engine,
    limits: Limits,
    *,
    lexicon: Lexicon | None,
    max_concurrent_requests: int,
    request_timeout_s: float,
    stream_interval_s: float = 0.0,
    max_input_tokens: int | None = None,
    max_chars: int = MAX_TEXT_CHARS,
    max_words: int = MAX_WORDS,
    context: bool = True,
) -> Stack:
    """The scheduler (not started: its owner starts it) and the request layer of one engine.
    `limits.max_batch_size` is the scheduler's batch size; `context`: heteronyms chosen by their sentence where the
    bundle has a context component."""
    metrics = ServiceMetrics(engine.bundle.model_id)
    scheduler = Scheduler(
        engine,
        metrics,
        max_batch_size=limits.max_batch_size,
        max_concurrent_requests=max_concurrent_requests,
        request_timeout_s=request_timeout_s,
        stream_interval_s=stream_interval_s,
    )
    # the request layer: inputs -> words, the lexicon's answers, the engine's tickets
    requests = RequestLayer(
        engine,
        scheduler,
        lexicon=lexicon,
        max_input_tokens=max_input_tokens,
        max_chars=max_chars,
        max_words=max_words,
        context=context,
    )
    return Stack(engine, metrics, scheduler, requests, limits)
