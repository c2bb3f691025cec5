"""Logit processors and token pickers: one step's logits `[R, V]` in, the rows' tokens out.

Processors work on a whole step with one parameter vector per row (`RowParams`, service/engine/rows.py), in
the order Hugging Face and TGI apply them: repetition penalty, frequency and presence penalties, end token
suppressed before `min_new_tokens`, temperature, top-k, top-p, typical-p. Rows with different settings
share one call; a processor touches only the rows that use it.

Token choice: greedy is the argmax of the processed row (the lowest id among ties); sampling is the shared
sampler of ARCHITECTURE.md: each row owns a `numpy.random.default_rng`, draws exactly ONE uniform per step,
and picks by inverse CDF over the processed distribution in float64 (token-id order, so a filtered token has
zero width and is never chosen). `sample_rows` does the arithmetic for all sampled rows at once.

One meaning of a token's `logprob` everywhere: the model's raw log-probability, the log-softmax of the
step's logits BEFORE any processor (`log_softmax`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from attnserve.service.engine.rows import RowParams


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities in float64; works on [V] or [R, V].

    Every decode step that reports log-probabilities runs this right after the decoder's call, when ONNX Runtime
    has just evicted the caches and each numpy call costs several times what it costs warm (benchmarks/HISTORY.md,
    "Where a request's CPU goes inside the server"): so the fewest calls, the ufuncs' own reductions (`x.max()` and
    `x.sum()` are Python wrappers around them, with the same result) and in-place arithmetic (the same values)."""
    x = np.array(logits, dtype=np.float64)  # a copy, written in place below
    m = np.maximum.reduce(x, axis=-1, keepdims=True)
    if math.isfinite(np.add.reduce(m, axis=None)):  # every row's max finite: the model's own logits, the common case
        x -= m
        s = np.add.reduce(np.exp(x), axis=-1, keepdims=True)
        x -= np.log(s, out=s)
        return x
    m = np.where(np.isfinite(m), m, 0.0)  # a row with every token barred stays -inf, not nan
    x -= m
    with np.errstate(divide="ignore"):
        x -= np.log(np.add.reduce(np.exp(x), axis=-1, keepdims=True))
    return x


def softmax(logits: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(logits))


def process_logits(
    logits: np.ndarray,
    params: RowParams,
    counts: np.ndarray | None,
    n_generated: np.ndarray,
    eos_id: int,
) -> np.ndarray:
    """The float64 logits tokens are chosen from, for R rows; -inf marks a token that cannot be chosen.

    logits [R, V] float; `params` R rows; counts [R, V] (how often each token was generated so far,
    for the penalties; None when no row has one); n_generated [R]. Returns a new [R, V] float64 array.
    """
    x = np.array(logits, dtype=np.float64)
    v = x.shape[-1]
    if counts is not None:
        rows = np.flatnonzero(params.repetition_penalty != 1.0)
        if rows.size:  # CTRL's penalty (Hugging Face's): a seen token's logit / p when positive, * p when negative
            p = params.repetition_penalty[rows, None]
            seen = counts[rows] > 0
            xr = x[rows]
            x[rows] = np.where(seen, np.where(xr > 0, xr / p, xr * p), xr)
        rows = np.flatnonzero(params.frequency_penalty != 0.0)
        if rows.size:  # OpenAI's / TGI's: minus penalty x times the token was generated
            x[rows] -= params.frequency_penalty[rows, None] * counts[rows]
        rows = np.flatnonzero(params.presence_penalty != 0.0)
        if rows.size:  # OpenAI's: minus penalty once for every token generated at least once
            x[rows] -= params.presence_penalty[rows, None] * (counts[rows] > 0)
    forced = np.flatnonzero(n_generated < params.min_new_tokens)
    if forced.size:
        x[forced, eos_id] = -np.inf
    rows = np.flatnonzero(params.temperature != 1.0)
    if rows.size:
        x[rows] /= params.temperature[rows, None]
    rows = np.flatnonzero((params.top_k > 0) & (params.top_k < v))
    if rows.size:
        x[rows] = _top_k(x[rows], params.top_k[rows])
    rows = np.flatnonzero(params.top_p < 1.0)
    if rows.size:
        x[rows] = _top_p(x[rows], params.top_p[rows])
    rows = np.flatnonzero(params.typical_p < 1.0)
    if rows.size:
        x[rows] = _typical_p(x[rows], params.typical_p[rows])
    return x


def _descending(x: np.ndarray) -> np.ndarray:
    """Column order of each row, largest first, ties towards the lower id (deterministic)."""
    return np.argsort(-x, axis=-1, kind="stable")


def _keep_sorted(x: np.ndarray, order: np.ndarray, keep_sorted: np.ndarray) -> np.ndarray:
    """x with -inf where the sorted-order mask is False (the first sorted column always kept)."""
    keep_sorted[:, 0] = True
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return np.where(keep, x, -np.inf)


def _top_k(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Keep each row's k largest logits."""
    order = _descending(x)
    return _keep_sorted(x, order, np.arange(x.shape[-1])[None, :] < k[:, None])


def _top_p(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Nucleus: keep the smallest set of most likely tokens whose probability reaches p (at least one)."""
    order = _descending(x)
    probs = softmax(np.take_along_axis(x, order, axis=-1))
    before = np.cumsum(probs, axis=-1) - probs  # mass strictly before each token in sorted order
    return _keep_sorted(x, order, before < p[:, None])


def _typical_p(x: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Locally typical sampling (Meister et al.; Hugging Face's TypicalLogitsWarper): keep the tokens
    whose surprisal is closest to the entropy, until their probability reaches `mass`."""
    logp = log_softmax(x)
    p = np.exp(logp)
    entropy = -np.nansum(np.where(p > 0, logp * p, 0.0), axis=-1, keepdims=True)
    shifted = np.abs(-logp - entropy)  # +inf for filtered tokens: they sort last
    order = np.argsort(shifted, axis=-1, kind="stable")
    sorted_shifted = np.take_along_axis(shifted, order, axis=-1)
    cum = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    last = np.minimum((cum < mass[:, None]).sum(axis=-1), x.shape[-1] - 1)
    cutoff = np.take_along_axis(sorted_shifted, last[:, None], axis=-1)
    return _keep_sorted(x, order, sorted_shifted <= cutoff)


def greedy_tokens(processed: np.ndarray) -> np.ndarray:
    """[R] argmax of each row (the lowest id among ties, as numpy and torch both pick)."""
    return np.argmax(processed, axis=-1)


def sample_rows(processed: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """[R] token ids by inverse CDF over each row's processed distribution, one uniform per row."""
    weights = np.exp(processed - np.max(processed, axis=-1, keepdims=True))  # exp(-inf) = 0: filtered
    cumsum = np.cumsum(weights, axis=-1)
    target = uniforms * cumsum[:, -1]
    idx = (cumsum <= target[:, None]).sum(axis=-1)  # searchsorted(cumsum, target, side="right") per row
    return np.minimum(idx, processed.shape[-1] - 1)  # u * total < total, so this only guards rounding


def draw_uniforms(generators: Sequence[np.random.Generator]) -> np.ndarray:
    """Exactly one uniform per sampled row per step, whatever else is in the batch."""
    return np.fromiter((g.random() for g in generators), dtype=np.float64, count=len(generators))


def top_tokens(raw_logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n most likely tokens of one row [V] with their raw log-probabilities, most likely first."""
    n = min(n, raw_logprobs.shape[-1])
    idx = np.argpartition(-raw_logprobs, n - 1)[:n]
    idx = idx[np.lexsort((idx, -raw_logprobs[idx]))]
    return [(int(i), float(raw_logprobs[i])) for i in idx]
