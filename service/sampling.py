"""Token choice from one row of logits: greedy, and reproducible sampling.

Numpy only, so the ONNX engine and the PyTorch reference decoder share it and
the same seed gives the same ids on both. The rules (ARCHITECTURE.md):
- every request owns `numpy.random.default_rng(seed)` and draws exactly ONE
  `rng.random()` per sampled step, whatever else happens in the batch;
- the filtered distribution is computed in float64 and sampled by inverse CDF
  over token-id order: `searchsorted(cumsum, u * total, side="right")`.
  Filtered-out tokens have zero width, so they can never be chosen.

Filters are small composable functions over a float64 row `[V]`, applied in
the order Hugging Face applies them: repetition penalty, temperature, top-k,
top-p. Greedy is argmax after the repetition penalty (if any).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int | None = None  # None or 0: off
    top_p: float | None = None  # None or 1.0: off
    repetition_penalty: float | None = None  # None or 1.0: off


def apply_repetition_penalty(logits: np.ndarray, previous_ids: Sequence[int], penalty: float | None) -> np.ndarray:
    """CTRL's penalty (as in Hugging Face): each already-generated token's logit is divided by
    `penalty` when positive, multiplied when negative, so it always becomes less likely.  # [V]"""
    if not penalty or penalty == 1.0 or len(previous_ids) == 0:
        return logits
    out = logits.copy()
    ids = np.unique(np.asarray(previous_ids, dtype=np.int64))
    seen = out[ids]
    out[ids] = np.where(seen > 0, seen / penalty, seen * penalty)
    return out


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return logits if temperature == 1.0 else logits / temperature


def top_k_filter(logits: np.ndarray, k: int | None) -> np.ndarray:
    """Keep the k largest logits (ties broken towards the lower id, deterministically); -inf elsewhere."""
    if not k or k >= logits.shape[-1]:
        return logits
    keep = np.argsort(-logits, kind="stable")[:k]
    out = np.full_like(logits, -np.inf)
    out[keep] = logits[keep]
    return out


def top_p_filter(logits: np.ndarray, p: float | None) -> np.ndarray:
    """Nucleus: keep the smallest set of most likely tokens whose probability reaches p (at least one)."""
    if p is None or p >= 1.0:
        return logits
    order = np.argsort(-logits, kind="stable")
    probs = softmax(logits[order])
    before = np.cumsum(probs) - probs  # mass strictly before each token in sorted order
    keep = order[before < p]
    keep = keep if keep.size else order[:1]
    out = np.full_like(logits, -np.inf)
    out[keep] = logits[keep]
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - np.max(logits))
    return z / z.sum()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities in float64; works on [V] or [B, V]."""
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def filtered_logits(logits_row: np.ndarray, params: SamplingParams, previous_ids: Sequence[int] = ()) -> np.ndarray:
    """The float64 logits the sampler draws from; -inf marks filtered-out tokens.  # [V]"""
    x = np.asarray(logits_row, dtype=np.float64)
    x = apply_repetition_penalty(x, previous_ids, params.repetition_penalty)
    x = apply_temperature(x, params.temperature)
    x = top_k_filter(x, params.top_k)
    return top_p_filter(x, params.top_p)


def sample_token(
    logits_row: np.ndarray, rng: np.random.Generator, params: SamplingParams, previous_ids: Sequence[int] = ()
) -> int:
    """Draw one token id from the filtered distribution with exactly one `rng.random()`."""
    x = filtered_logits(logits_row, params, previous_ids)
    weights = np.exp(x - np.max(x))  # unnormalised; exp(-inf) = 0 for filtered tokens
    cumsum = np.cumsum(weights)
    total = cumsum[-1]
    u = rng.random()
    idx = int(np.searchsorted(cumsum, u * total, side="right"))
    return min(idx, len(cumsum) - 1)  # u * total < total, so this only guards rounding


def greedy_token(logits_row: np.ndarray, previous_ids: Sequence[int] = (), repetition_penalty: float | None = None) -> int:
    """Argmax (the lowest id among ties, as numpy and torch both pick)."""
    if repetition_penalty and repetition_penalty != 1.0:
        logits_row = apply_repetition_penalty(np.asarray(logits_row, dtype=np.float64), previous_ids, repetition_penalty)
    return int(np.argmax(logits_row))
