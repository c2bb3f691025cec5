"""When a sequence stops, and how finished sequences are ranked.

- `StoppingCriteria`: length and stop sequences, as TGI's: `(stop, reason)` (the end token is the step's).
- `length_limit`: the most tokens a request may generate, within the bundle's length bound.
- `Hypothesis` and `rank`: a finished sequence, and the one ranking rule of every n-best list: the mean raw
  log-probability of its generated tokens, the end token included (TGI's best_of rule, and beam search's
  length normalisation with exponent 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnserve.service.engine.options import DecodingOptions


@dataclass
class Hypothesis:
    """One finished sequence: generated ids (without the end token) and raw log-probabilities."""

    token_ids: list[int]
    logprobs: list[float]  # raw, aligned with token_ids
    finish_reason: str
    eos_logprob: float | None = None  # the end token's, when it ended the sequence
    seed: int | None = None
    index: int = 0  # which candidate (best_of) or beam it was
    text: str = ""

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids) + (self.finish_reason == "eos_token")

    @property
    def score(self) -> float:
        """The ranking rule: mean raw log-probability of the generated tokens, the end token included."""
        lps = [*self.logprobs, *([self.eos_logprob] if self.eos_logprob is not None else [])]
        # np.mean's own sum and division (the same float), without its dispatch: a fourth of its cost per answer
        return float(np.add.reduce(np.array(lps, dtype=np.float64)) / len(lps)) if lps else 0.0


def rank(hypotheses: Sequence[Hypothesis]) -> list[Hypothesis]:
    """Best first by `Hypothesis.score`; ties keep their order (candidate index)."""
    return sorted(hypotheses, key=lambda h: -h.score)


@dataclass(frozen=True)
class StoppingCriteria:
    """When a sequence stops besides its end token: its length bound and stop sequences (TGI's)."""

    max_new_tokens: int
    stop: tuple[str, ...] = ()

    def __call__(self, n_tokens: int, old_text: str, new_text: str) -> tuple[bool, str | None]:
        """(stop, reason) after a token was appended: old_text/new_text are the decodes before/after it."""
        if self.stop and any(new_text.find(s, max(0, len(old_text) - len(s) + 1)) != -1 for s in self.stop):
            return True, "stop_sequence"
        if n_tokens >= self.max_new_tokens:
            return True, "length"
        return False, None


def length_limit(options: DecodingOptions, bound: int | None) -> int:
    """Most tokens a request may generate: what it asked for, within the bundle's length bound for its
    source (None: no bound). min_new_tokens lifts the bound (the benchmark forces lengths with it)."""
    if bound is None or options.min_new_tokens > 0:
        return options.max_new_tokens
    return max(1, min(options.max_new_tokens, bound))
