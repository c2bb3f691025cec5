"""A request's decoding settings, validated once, and the seeding rule of its sampled rows.

- `BOUNDS`: the range of every numeric setting, the one place each is written. The wire schemas check JSON types
  only; the HTTP layers map these refusals onto their APIs' error shapes, and /docs shows the ranges from here
  (`Bound.json_schema`).
- `DecodingOptions`: a request's settings (TGI's names, plus `num_beams`), frozen and validated in
  `__post_init__` (`InputError` says what to fix): every value within its bound, then the rules across
  settings; what follows from them (sampling, beam search, how many rows the request owns) is computed once.
- Seeding: `request_seed` (the request's own seed, or one picked here and reported back) and
  `row_generator` (the `numpy.random.default_rng` each sampled row draws from).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

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


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Bound:
    """A setting's range: from `low` to `high` (None: unbounded), each end included unless `low_open`/`high_open`;
    `integer`: whole numbers only; `note`: what a value means, said in the refusal (`0 = off`)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    note: str = ""

    def contains(self, x: Any) -> bool:
        if x != x:  # NaN
            return False
        if self.integer and not _is_int(x):
            return False
        if not self.integer and (isinstance(x, bool) or not isinstance(x, int | float | np.number)):
            return False
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or (x < self.high if self.high_open else x <= self.high)

    def says(self) -> str:
        """What a value must be: `> 0`, `in (0, 1]`, `between -2 and 2`, `a positive integer`."""
        low, high = self.low, self.high
        if self.integer:
            said = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
            said += f" at most {_number(high)}" if high is not None else ""
        elif high is None:
            said = f"{'>' if self.low_open else '>='} {_number(low)}"
        elif self.low_open or self.high_open:
            said = f"in {'(' if self.low_open else '['}{_number(low)}, {_number(high)}{')' if self.high_open else ']'}"
        else:
            said = f"between {_number(low)} and {_number(high)}"
        return f"{said} ({self.note})" if self.note else said

    def refusal(self, name: str, x: Any) -> str:
        return f"{name} must be {self.says()}, got {x!r}"

    def json_schema(self) -> dict[str, float]:
        """The range as JSON Schema keywords (for the wire schemas' documentation)."""
        out: dict[str, float] = {}
        if self.low is not None:
            out["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        if self.high is not None:
            out["exclusiveMaximum" if self.high_open else "maximum"] = self.high
        return out


# Every numeric setting's range, written once: the engine's refusals, the front ends' checks of fields the engine
# never sees (an OpenAI request's top_p when it does not sample), and /docs read it here.
BOUNDS: Mapping[str, Bound] = {
    "max_new_tokens": Bound(1, integer=True),
    "min_new_tokens": Bound(0, integer=True),
    "temperature": Bound(0, low_open=True),
    "top_k": Bound(0, integer=True, note="0 = off"),
    "top_p": Bound(0, 1, low_open=True),
    "typical_p": Bound(0, 1, low_open=True),
    "repetition_penalty": Bound(0, low_open=True),
    "frequency_penalty": Bound(-2, 2),
    "presence_penalty": Bound(-2, 2),
    "seed": Bound(0, 2**64 - 1, integer=True),
    "best_of": Bound(1, integer=True),
    "num_beams": Bound(1, integer=True),
    "top_n_tokens": Bound(0, integer=True),
}

SET_ALWAYS = ("max_new_tokens", "min_new_tokens", "best_of", "top_n_tokens")  # the options that have no unset value


def check_bound(option: str, x: Any, name: str | None = None) -> None:
    """InputError (its field: `option`) unless `x` is within `BOUNDS[option]`; None (unset) passes. `name`: the
    setting as the caller's API calls it, for the message (default: `option`)."""
    if x is not None and not BOUNDS[option].contains(x):
        raise InputError(BOUNDS[option].refusal(name or option, x), option)


def beams_with_sampling(num_beams: int | None, sampling: bool) -> None:
    """InputError when a request asks for beams (num_beams > 1) and sampling at once: beam search does not sample."""
    if num_beams is not None and num_beams > 1 and sampling:
        raise InputError(
            "num_beams is beam search, which does not sample: drop num_beams, or the sampling parameters", "num_beams"
        )


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
        for option, bound in BOUNDS.items():
            x = getattr(self, option)
            if x is None and option in SET_ALWAYS:
                raise InputError(bound.refusal(option, x), option)
            check_bound(option, x)
        if self.min_new_tokens > self.max_new_tokens:
            raise InputError(
                f"min_new_tokens must be between 0 and max_new_tokens, got {self.min_new_tokens!r}", "min_new_tokens"
            )
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise InputError("stop must be a list of non-empty strings", "stop")
        object.__setattr__(self, "stop", tuple(self.stop))
        beams_with_sampling(self.num_beams, self.sampling)

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
