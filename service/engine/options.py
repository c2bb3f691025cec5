"""A request's decoding settings, validated once, and the seeding rule of its sampled rows.

- `DecodingOptions`: a request's settings (TGI's names, plus `num_beams`), frozen and validated in
  `__post_init__` (`InputError` says what to fix); what follows from them (sampling, beam search, how
  many rows the request owns) is computed once.
- Seeding: `request_seed` (the request's own seed, or one picked here and reported back) and
  `row_generator` (the `numpy.random.default_rng` each sampled row draws from).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import cached_property

import numpy as np


class InputError(ValueError):
    """A request the engine cannot honour; the message says what to fix. `field`: the option at fault, when one is
    (`temperature`); the one validator (service/requests/validation.py) names it as a path in a request,
    `parameters.temperature`."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


@dataclass(frozen=True)
class DecodingOptions:
    """One request's decoding settings (TGI's names, plus `num_beams`)."""

    max_new_tokens: int = 32
    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    typical_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None  # OpenAI's: minus this once a token has been generated at all
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    # eos is suppressed until this many tokens (Hugging Face's min_new_tokens); the benchmark uses
    # it to force exact output lengths from any model, and it lifts the bundle's length bound.
    min_new_tokens: int = 0
    # n-best: sampled candidates when sampling (TGI), beam search of width max(best_of, num_beams) otherwise
    best_of: int = 1
    num_beams: int | None = None
    top_n_tokens: int = 0  # the n most likely tokens of every step, with their log-probabilities
    # each token's text as it is chosen (a stream's deltas, TGI's details, /explain); off, the answer's
    # text is decoded once at its end: a tokenizer call per token saved where nobody reads them
    token_text: bool = True

    def __post_init__(self) -> None:
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}", "max_new_tokens")
        if self.temperature is not None and not self.temperature > 0:
            raise InputError(f"temperature must be > 0, got {self.temperature!r}", "temperature")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 0):
            raise InputError(f"top_k must be a non-negative integer (0 = off), got {self.top_k!r}", "top_k")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}", "top_p")
        if self.typical_p is not None and not 0 < self.typical_p <= 1:
            raise InputError(f"typical_p must be in (0, 1], got {self.typical_p!r}", "typical_p")
        if self.repetition_penalty is not None and not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be > 0, got {self.repetition_penalty!r}", "repetition_penalty")
        if self.frequency_penalty is not None and not -2.0 <= self.frequency_penalty <= 2.0:
            raise InputError(f"frequency_penalty must be between -2 and 2, got {self.frequency_penalty!r}", "frequency_penalty")
        if self.presence_penalty is not None and not -2.0 <= self.presence_penalty <= 2.0:
            raise InputError(f"presence_penalty must be between -2 and 2, got {self.presence_penalty!r}", "presence_penalty")
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise InputError(f"seed must be a non-negative integer, got {self.seed!r}", "seed")
        if not _is_int(self.min_new_tokens) or not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise InputError(
                f"min_new_tokens must be between 0 and max_new_tokens, got {self.min_new_tokens!r}", "min_new_tokens"
            )
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise InputError("stop must be a list of non-empty strings", "stop")
        object.__setattr__(self, "stop", tuple(self.stop))
        if not _is_int(self.best_of) or self.best_of < 1:
            raise InputError(f"best_of must be a positive integer, got {self.best_of!r}", "best_of")
        if self.num_beams is not None and (not _is_int(self.num_beams) or self.num_beams < 1):
            raise InputError(f"num_beams must be a positive integer, got {self.num_beams!r}", "num_beams")
        if self.num_beams is not None and self.num_beams > 1 and self.sampling:
            raise InputError(
                "num_beams is beam search, which does not sample: drop num_beams, or the sampling parameters", "num_beams"
            )
        if not _is_int(self.top_n_tokens) or self.top_n_tokens < 0:
            raise InputError(f"top_n_tokens must be a non-negative integer, got {self.top_n_tokens!r}", "top_n_tokens")

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def sampling(self) -> bool:
        """TGI semantics: sample iff asked to, or any sampling parameter is set (top_k 0 = off)."""
        return bool(
            self.do_sample
            or self.temperature is not None
            or self.top_k
            or self.top_p is not None
            or (self.typical_p is not None and self.typical_p < 1.0)
        )

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def beam_search(self) -> bool:
        """Beam search: not sampling, and best_of > 1 or num_beams given (num_beams=1 is beam search of width 1)."""
        return not self.sampling and (self.best_of > 1 or self.num_beams is not None)

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def beam_width(self) -> int:
        return max(self.best_of, self.num_beams or 1)

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def n_rows(self) -> int:
        """Batch rows the request owns: its beams, its best_of samples, or 1."""
        return self.beam_width if self.beam_search else (self.best_of if self.sampling else 1)

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def n_best(self) -> int:
        """Hypotheses returned, best first."""
        return self.best_of

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def streams(self) -> bool:
        """Whether its tokens can be streamed as they come: one row, decided token by token."""
        return self.n_rows == 1 and not self.beam_search


# ---- seeding ------------------------------------------------------------------------------------
def request_seed(options: DecodingOptions) -> int | None:
    """The seed a sampled request uses: its own, or one picked here (and reported back); None for greedy/beam."""
    if not options.sampling:
        return None
    return options.seed if options.seed is not None else secrets.randbits(63)


def row_generator(seed: int, index: int, n_rows: int) -> np.random.Generator:
    """A sampled row's generator: `default_rng(seed)` for a single-row request, so a seed means the
    same thing with or without the server; candidate i of a best_of request draws from
    `default_rng([seed, i])`, so candidates differ and each is reproducible on its own."""
    return np.random.default_rng(seed if n_rows == 1 else [seed, index])
