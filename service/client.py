"""The in-process Python API: the server's engine and continuous batching, without HTTP.

    from service import Generator
    with Generator("models/g2p-en") as g:
        g.generate("attention").text                   # 'AH0 T EH1 N SH AH0 N'
        [r.text for r in g.generate_many(words)]       # batched, in input order
        for token in g.stream("attention"): ...        # engine StepResults as they come

Calls may come from several threads at once: they share one running batch,
exactly as concurrent HTTP requests do.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from service.bundle import load_bundle
from service.engine import DecodingOptions, Engine, GenerationResult, InputError, StepResult
from service.metrics import ServiceMetrics
from service.scheduler import Failed, Finished, Scheduler, Ticket


class GenerationError(RuntimeError):
    """A request the scheduler ended with an error (timeout, shutdown, engine failure)."""


class Generator:
    """Load a bundle once; generate with the server's scheduler. Keyword parameters of the
    generate methods are `DecodingOptions` fields (max_new_tokens, do_sample, temperature, top_k,
    top_p, repetition_penalty, seed, stop, logprobs); max_new_tokens defaults to the bundle's limit."""

    def __init__(
        self,
        bundle_dir: str | Path,
        *,
        variant: str = "auto",
        provider: str = "auto",
        threads: int | None = None,
        max_batch_size: int = 32,
        request_timeout_s: float = 24 * 3600.0,
        engine: Engine | None = None,
    ):
        self.engine = engine or Engine(load_bundle(bundle_dir), variant=variant, provider=provider, threads=threads)
        self.metrics = ServiceMetrics(self.engine.bundle.model_id)
        self.max_batch_size = max_batch_size
        self.scheduler = Scheduler(
            self.engine,
            self.metrics,
            max_batch_size=max_batch_size,
            max_concurrent_requests=1 << 30,  # in-process callers wait instead of being refused
            request_timeout_s=request_timeout_s,
        )
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.stop()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def options(self, **params: object) -> DecodingOptions:
        params.setdefault("max_new_tokens", self.engine.max_target_len)
        if "stop" in params and params["stop"] is not None:
            params["stop"] = tuple(params["stop"])
        options = DecodingOptions(**params)
        if options.n_rows > self.max_batch_size:
            raise InputError(f"best_of/num_beams need {options.n_rows} batch rows; max_batch_size is {self.max_batch_size}")
        return options

    def submit(self, text: str | list[int], options: DecodingOptions) -> Ticket:
        ids = self.engine.encode_text(text) if isinstance(text, str) else list(text)
        return self.scheduler.submit(ids, options)

    def generate(self, text: str | list[int], **params: object) -> GenerationResult:
        """One input (text or source ids) -> its result; raises InputError for input the model cannot read."""
        return _result(self.submit(text, self.options(**params)))

    def generate_many(
        self,
        texts: Iterable[str | list[int]],
        *,
        window: int | None = None,
        on_result: Callable[[int, GenerationResult | InputError], None] | None = None,
        **params: object,
    ) -> Iterator[GenerationResult | InputError]:
        """Results in input order. Up to `window` requests (default 4 x max_batch_size) are in
        flight, so rows that finish are replaced at once. An input the model cannot read yields its
        InputError in its place instead of stopping the run."""
        options = self.options(**params)
        window = window or 4 * self.max_batch_size
        pending: collections.deque[tuple[int, Ticket | InputError]] = collections.deque()
        source = iter(enumerate(texts))
        exhausted = False
        while True:
            while not exhausted and len(pending) < window:
                try:
                    i, text = next(source)
                except StopIteration:
                    exhausted = True
                    break
                try:
                    pending.append((i, self.submit(text, options)))
                except InputError as e:
                    pending.append((i, e))
            if not pending:
                return
            i, item = pending.popleft()
            out = item if isinstance(item, InputError) else _result(item)
            if on_result is not None:
                on_result(i, out)
            yield out

    def stream(self, text: str | list[int], **params: object) -> Iterator[StepResult]:
        """Tokens as the engine produces them; closing the iterator early cancels the request."""
        ticket = self.submit(text, self.options(**params))
        try:
            while True:
                for ev in ticket.next_events_blocking():
                    if isinstance(ev, Failed):
                        raise GenerationError(ev.error.message)
                    if isinstance(ev, Finished):
                        return
                    yield ev
        finally:
            ticket.cancel()


def _result(ticket: Ticket) -> GenerationResult:
    """Block until the ticket finishes; its GenerationResult."""
    while True:
        for ev in ticket.next_events_blocking():
            if isinstance(ev, Failed):
                raise GenerationError(ev.error.message)
            if isinstance(ev, Finished):
                return GenerationResult.of(ticket.generation)
