"""What the routes share: the `Service`, built once by the app's lifespan, and how its engine is loaded and warmed up.

Routes reach it through the `get_service` dependency (service/http/dependencies.py).
"""

from __future__ import annotations

import asyncio

from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.explain import Explainer
from attnserve.service.http.schemas import GenerateRequest
from attnserve.service.http.validation import Validator, tgi_request
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.stack import build_stack
from attnserve.service.requests.validation import Limits, ValidRequest, validate
from attnserve.service.settings import ConfigError, Settings
from attnserve.service.text.lexicon import Lexicon

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


def load_lexicon(settings: Settings, engine: Engine) -> Lexicon | None:
    """The bundle's lexicon with the operator's file (`settings.lexicon`) on top; None when there is neither.
    Raises LexiconError (one line: FILE:LINE and what is wrong) on a bad override line."""
    return Lexicon.load(engine.bundle, settings.lexicon, engine.src_tokenizer, engine.tgt_tokenizer)


def warm_up(engine: Engine) -> None:
    """One greedy and one sampled generation over rows of different lengths, so the first real
    request does not pay for ONNX Runtime's first-run allocations and kernel choices."""
    # the first ordinary source token (an imported vocabulary may put its special tokens last: Marian's pad)
    first = min(set(range(len(engine.special_token_ids) + 1)) - engine.special_token_ids)
    sources = [[first], [first] * min(4, engine.max_source_len)]
    engine.generate(sources, DecodingOptions(max_new_tokens=min(4, engine.max_target_len)))
    engine.generate(sources, DecodingOptions(max_new_tokens=min(4, engine.max_target_len), do_sample=True, seed=0))


class Service:
    """Everything the routes share: settings, the service stack (engine, scheduler, request layer, validator:
    service/requests/stack.py), metrics, explainer, and the readiness and drain flags. `loop` is the event loop the
    scheduler wakes (set by the lifespan)."""

    def __init__(self, settings: Settings, engine: Engine, keepalive_s: float = SSE_KEEPALIVE_S, lexicon: Lexicon | None = None):
        self.settings = settings
        self.engine = engine
        self.keepalive_s = keepalive_s
        self.max_input_tokens, self.max_new_tokens = resolve_limits(settings, engine)
        self.limits = Limits(
            max_new_tokens=self.max_new_tokens,
            max_best_of=settings.max_best_of,
            max_top_n_tokens=settings.max_top_n_tokens,
            max_batch_size=settings.max_batch_size,
            max_concurrent_requests=settings.max_concurrent_requests,
            **engine.search_defaults,
        )
        stack = build_stack(
            engine,
            self.limits,
            lexicon=lexicon,
            max_concurrent_requests=settings.max_concurrent_requests,
            request_timeout_s=settings.request_timeout_s,
            stream_interval_s=settings.stream_interval_ms / 1000,
            max_input_tokens=self.max_input_tokens,
            max_chars=settings.max_text_chars,
            max_words=settings.max_words,
            context=settings.context,
        )
        self.metrics = stack.metrics
        self.scheduler = stack.scheduler
        self.requests = stack.requests  # the request layer (service/requests/frontend.py)
        self.validator = Validator(self.limits)  # TGI's parameters -> decoding options (service/http/validation.py)
        self.lexicon = lexicon
        self.reader = self.requests.reader  # None: inputs are read whole
        self.ready = False
        self.draining = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.explainer = Explainer.for_engine(engine)  # POST /explain's graphs; None when the bundle has none

    def use_lexicon(self, lexicon: Lexicon) -> None:
        """Answer later requests from `lexicon` (the operator's file read again); on the event loop's thread."""
        self.lexicon = self.requests.lexicon = lexicon

    def validate(self, body: GenerateRequest, stream: bool) -> ValidRequest:
        """A TGI body as the internal request (service/http/validation.py `tgi_request`) through the one validator
        (service/requests/validation.py). Raises InvalidRequest (422) naming the option at fault."""
        return validate(self.requests, tgi_request(body, stream, self.validator))

    def admit(self, body: GenerateRequest, stream: bool) -> AdmittedRequest:
        """Validate a generation request, answer what the lexicon knows and queue the rest for the engine
        (service/requests/frontend.py). Raises the validator's InvalidRequest (422), or the scheduler's ServiceErrors
        (429, 503), which the app's handlers and the generation routes' handler answer alike."""
        return self.requests.admit(self.validate(body, stream), stream=stream, loop=self.loop)
