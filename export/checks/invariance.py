"""Batch invariance at the graph level: a row's outputs do not depend on the rest of its batch.

The service batches rows of different requests into one encoder call and one decoder step, padded to
the longest source (right padding, `attention_mask` 0 / `encoder_attention_bias` -1e9), with each
row's cache at its own length. For the answers to be the same whatever the traffic, each row must
compute exactly what it computes alone. `batch_invariance` runs every row alone (B = 1, no padding)
and again inside shuffled batches padded with finite garbage, and compares what they compute: the
encoder's outputs, the decoder's logits and the cache each row writes.

One check, two step runners, one per cache layout (Contract 2):
- `ConcatSteps` (v1, `kv_cache: "concat"`): a row's past is made by the decoder itself (P tokens at
  once from P = 0, P random up to MAX_PAST), then one step; batched, the past is left-padded with
  garbage under `decoder_attention_mask` 0;
- `InPlaceSteps` (v2, `"in_place"`, export/checks/steps.py's StepRunner): `steps` forced tokens one step
  at a time through the cache buffers bound in place; batched, rows join at different steps, the
  source axis is padded to the batch's longest (rounded up) with garbage under the mask, and the
  buffers hold garbage past every row's length.
The check needs nothing but the two graphs and some real source ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime as ort

from attnserve.export.checks.steps import StepRunner, pad_cross, v2_session
from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    PAST,
    POSITION_IDS,
    PRESENT,
    past_name,
    past_names,
    present_names,
)
from attnserve.service.engine.runtime import session_options
from attnserve.service.engine.slots import padded_source_len

MAX_PAST = 12  # v1: past lengths drawn from 0..MAX_PAST
EXTRA_SOURCE_PAD = 3  # v1: batched rows are padded this much beyond the longest source
EXTRA_PAST_PAD = 2  # v1: and this much beyond the longest past


def cpu_session(path: Path, threads: int = 1) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])


class InvarianceSteps(Protocol):
    """A decoder's step runner for `batch_invariance`: how one cache layout decodes a row alone and a batch."""

    encoder: ort.InferenceSession
    n_layers: int
    extra_source_pad: int  # how far the batched encoder call pads beyond the longest source

    def alone(self, ids: list[int], encoded: dict[str, np.ndarray], rng: np.random.Generator) -> dict:
        """Decode one row alone from its own encoder outputs (B = 1); what `batched` compares with."""

    def batched(self, rows: list[dict], encoded: dict[str, np.ndarray], rng: np.random.Generator) -> tuple[float, float]:
        """Decode `rows` (their `alone` records) as one batch over the batched encoder outputs; returns the
        largest |difference| from their alone runs in (logits, cache)."""

    def report(self, figures: dict) -> dict:
        """The check's figures under this layout's names."""


def batch_invariance(
    steps: InvarianceSteps, source_ids: list[list[int]], batch_size: int = 32, seed: int = 0, pad_id: int = 0
) -> dict:
    """Max |difference| between each row alone and the same row in padded batches of `batch_size`, for the
    step runner `steps` (ConcatSteps or InPlaceSteps). 0.0 means bitwise identical. Returns {"rows",
    "batch_size", "encoder_max_abs_diff", "decoder_logits_max_abs_diff", the cache's figure, "max_abs_diff"}."""
    rng = np.random.default_rng(seed)
    enc_names = [o.name for o in steps.encoder.get_outputs()]
    alone = []
    for ids in source_ids:  # alone: B = 1, no padding anywhere
        x = np.asarray([ids], np.int64)
        encoded = dict(zip(enc_names, steps.encoder.run(None, {INPUT_IDS: x, ATTENTION_MASK: np.ones_like(x)})))
        alone.append({"ids": ids, "enc": encoded, **steps.alone(ids, encoded, rng)})
    enc_diff = logit_diff = cache_diff = 0.0
    order = rng.permutation(len(alone))
    cross_out = present_names(steps.n_layers, ENCODER)
    for start in range(0, len(order), batch_size):
        chunk = [alone[i] for i in order[start : start + batch_size]]
        b = len(chunk)
        s = max(len(r["ids"]) for r in chunk) + steps.extra_source_pad
        x = np.full((b, s), pad_id, np.int64)
        mask = np.zeros((b, s), np.int64)
        for j, r in enumerate(chunk):
            x[j, : len(r["ids"])], mask[j, : len(r["ids"])] = r["ids"], 1
        encoded = dict(zip(enc_names, steps.encoder.run(None, {INPUT_IDS: x, ATTENTION_MASK: mask})))
        for j, r in enumerate(chunk):
            n = len(r["ids"])
            enc_diff = max(enc_diff, _diff(encoded[ENCODER_ATTENTION_BIAS][j, ..., :n], r["enc"][ENCODER_ATTENTION_BIAS][0]))
            for o in cross_out:
                enc_diff = max(enc_diff, _diff(encoded[o][j, :, :n], r["enc"][o][0]))
        logits, cache = steps.batched(chunk, encoded, rng)
        logit_diff, cache_diff = max(logit_diff, logits), max(cache_diff, cache)
    figures = {"rows": len(alone), "batch_size": batch_size, "encoder": enc_diff, "logits": logit_diff, "cache": cache_diff}
    return steps.report(figures)


class ConcatSteps:
    """The v1 decoder (`kv_cache: "concat"`): a row's past made by the decoder itself, then one step; batched,
    each row's alone-computed cache left-padded with finite garbage (what a reused slot holds in the engine)."""

    extra_source_pad = EXTRA_SOURCE_PAD

    def __init__(self, encoder_path: Path, decoder_path: Path, n_layers: int, vocab_size: int, threads: int = 1):
        self.encoder, self.decoder = cpu_session(encoder_path, threads), cpu_session(decoder_path, threads)
        self.n_layers, self.vocab_size = n_layers, vocab_size
        self.dec_names = [o.name for o in self.decoder.get_outputs()]
        self.cross_in = past_names(n_layers, ENCODER)
        self.self_in = self_attention_inputs(n_layers)
        self.self_out = present_names(n_layers, DECODER)

    def alone(self, ids: list[int], encoded: dict[str, np.ndarray], rng: np.random.Generator) -> dict:
        p = int(rng.integers(0, MAX_PAST + 1))
        tokens = rng.integers(4, self.vocab_size, p + 1).astype(np.int64)
        feeds = cross_feeds(encoded)
        if p:  # the row's own past: its first p tokens in one call from an empty cache
            first = decoder_feeds(feeds, tokens[None, :p], np.arange(p)[None], np.ones((1, p), np.int64), None, self.self_in)
            d = dict(zip(self.dec_names, self.decoder.run(None, first)))
            past = [d[o] for o in self.self_out]
        else:
            past = None
        step = decoder_feeds(feeds, tokens[None, p:], np.array([[p]]), np.ones((1, p + 1), np.int64), past, self.self_in)
        out = dict(zip(self.dec_names, self.decoder.run(None, step)))
        return {"p": p, "token": tokens[p], "past": step, "out": out}

    def batched(self, chunk: list[dict], encoded: dict[str, np.ndarray], rng: np.random.Generator) -> tuple[float, float]:
        b, s = len(chunk), encoded[ENCODER_ATTENTION_BIAS].shape[-1]
        p = max(r["p"] for r in chunk) + EXTRA_PAST_PAD
        feeds = {
            INPUT_IDS: np.array([[r["token"]] for r in chunk], np.int64),
            POSITION_IDS: np.array([[r["p"]] for r in chunk], np.int64),
            DECODER_ATTENTION_MASK: np.zeros((b, p + 1), np.int64),
            ENCODER_ATTENTION_BIAS: np.full((b, 1, 1, s), -1e9, np.float32),
        }
        for j, r in enumerate(chunk):
            n = len(r["ids"])
            feeds[DECODER_ATTENTION_MASK][j, p - r["p"] :] = 1
            feeds[ENCODER_ATTENTION_BIAS][j, ..., :n] = r["enc"][ENCODER_ATTENTION_BIAS][0]
        for name in self.cross_in:
            h, dh = chunk[0]["past"][name].shape[1::2]
            arr = rng.standard_normal((b, h, s, dh)).astype(np.float32)
            for j, r in enumerate(chunk):
                arr[j, :, : len(r["ids"])] = r["past"][name][0]
            feeds[name] = arr
        for name in self.self_in:
            h, dh = chunk[0]["past"][name].shape[1::2]
            arr = rng.standard_normal((b, h, p, dh)).astype(np.float32)
            for j, r in enumerate(chunk):
                if r["p"]:
                    arr[j, :, p - r["p"] :] = r["past"][name][0]
            feeds[name] = arr
        out = dict(zip(self.dec_names, self.decoder.run(None, feeds)))
        logit_diff = present_diff = 0.0
        for j, r in enumerate(chunk):
            logit_diff = max(logit_diff, _diff(out[LOGITS][j], r["out"][LOGITS][0]))
            for o in self.self_out:
                present_diff = max(present_diff, _diff(out[o][j, :, p - r["p"] :], r["out"][o][0]))
        return logit_diff, present_diff

    def report(self, f: dict) -> dict:
        return {
            "rows": f["rows"],
            "batch_size": f["batch_size"],
            "encoder_max_abs_diff": f["encoder"],
            "decoder_logits_max_abs_diff": f["logits"],
            "decoder_present_max_abs_diff": f["cache"],
            "max_abs_diff": max(f["encoder"], f["logits"], f["cache"]),
        }


class InPlaceSteps:
    """The v2 decoder (`kv_cache: "in_place"`): `steps` forced random tokens per row through cache buffers bound
    as past and present (export/checks/steps.py's StepRunner, as the engine binds them). Alone, a row's source is
    padded to its own multiple of CROSS_KEY_MULTIPLE; batched, rows start at different steps, the source axis is
    padded to the batch's longest (rounded up) with finite garbage under the mask, and the buffers hold garbage
    past every row's length. The cache figure is each row's written cache."""

    extra_source_pad = 0

    def __init__(self, encoder_path: Path, decoder_path: Path, n_layers: int, max_len: int, vocab_size: int, steps: int = 6):
        self.encoder, self.decoder = v2_session(encoder_path), v2_session(decoder_path)
        self.n_layers, self.max_len, self.vocab_size, self.steps = n_layers, max_len, vocab_size, steps
        self.cross_out = present_names(n_layers, ENCODER)
        self.runner = StepRunner(self.decoder, n_layers, 1, max_len)  # every row alone, one after another

    def _cross(self, encoded: dict[str, np.ndarray], j: int, n: int, width: int | None, fill=None):
        bias, cross = encoded[ENCODER_ATTENTION_BIAS][j, 0, 0], [encoded[o][j] for o in self.cross_out]
        return pad_cross(bias, cross, n, width, fill)

    def alone(self, ids: list[int], encoded: dict[str, np.ndarray], rng: np.random.Generator) -> dict:
        tokens = rng.integers(4, self.vocab_size, self.steps)
        runner = self.runner
        runner.set_cross(*self._cross(encoded, 0, len(ids), None))
        logits = np.stack([runner.step(np.array([t]), np.array([p]))[0][0] for p, t in enumerate(tokens)])
        return {"tokens": tokens, "logits": logits, "cache": [c[0, :, : self.steps].copy() for c in runner.cache]}

    def batched(self, chunk: list[dict], encoded: dict[str, np.ndarray], rng: np.random.Generator) -> tuple[float, float]:
        b, steps, n_layers = len(chunk), self.steps, self.n_layers
        runner = StepRunner(self.decoder, n_layers, b, self.max_len)
        for c in runner.cache:
            c[...] = rng.standard_normal(c.shape).astype(np.float32)  # a reused slot's leftovers
        width = padded_source_len(max(len(r["ids"]) for r in chunk) + 1)
        garbage = lambda shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
        padded = [self._cross(encoded, j, len(r["ids"]), width, garbage) for j, r in enumerate(chunk)]
        runner.set_cross(
            np.concatenate([p[0] for p in padded]), [np.concatenate([p[1][k] for p in padded]) for k in range(2 * n_layers)]
        )
        offset = rng.integers(0, 3, b)  # rows join at different steps
        logits = np.zeros((b, steps, self.vocab_size), np.float32)
        for k in range(steps + 2):
            p = k - offset
            live = (p >= 0) & (p < steps)
            toks = np.array([r["tokens"][min(max(q, 0), steps - 1)] for r, q in zip(chunk, p)])
            # a row not yet joined computes at length 0, one that finished past its end: neither touches
            # what the compared positions hold by the time they are read
            out = runner.step(toks, np.clip(p, 0, self.max_len - 1))
            for j in np.flatnonzero(live):
                logits[j, p[j]] = out[0][j]
        logit_diff = cache_diff = 0.0
        for j, r in enumerate(chunk):
            logit_diff = max(logit_diff, float(np.abs(logits[j] - r["logits"]).max()))
            for c, a in zip(runner.cache, r["cache"]):
                cache_diff = max(cache_diff, float(np.abs(c[j, :, :steps] - a).max()))
        return logit_diff, cache_diff

    def report(self, f: dict) -> dict:
        return {
            "rows": f["rows"],
            "batch_size": f["batch_size"],
            "steps": self.steps,
            "encoder_max_abs_diff": f["encoder"],
            "decoder_logits_max_abs_diff": f["logits"],
            "decoder_cache_max_abs_diff": f["cache"],
            "max_abs_diff": max(f["encoder"], f["logits"], f["cache"]),
        }


def self_attention_inputs(n_layers: int) -> list[str]:
    """The decoder's past self-attention cache inputs, in the order its present outputs come."""
    return past_names(n_layers, DECODER)


def cross_feeds(encoder_outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The decoder's inputs that come from the encoder: the attention bias and the cross-attention K/V."""
    feeds = {ENCODER_ATTENTION_BIAS: encoder_outputs[ENCODER_ATTENTION_BIAS]}
    for name, value in encoder_outputs.items():
        if name.startswith(PRESENT):
            feeds[past_name(name)] = value
    return feeds


def decoder_feeds(cross: dict, ids, positions, mask, past: list[np.ndarray] | None, self_in: list[str]) -> dict:
    """One row's decoder inputs: `cross_feeds`, the tokens at `positions`, and its past (None: an empty cache)."""
    feeds = {**cross, INPUT_IDS: np.asarray(ids, np.int64), POSITION_IDS: np.asarray(positions, np.int64)}
    feeds[DECODER_ATTENTION_MASK] = mask
    h, dh = cross[next(k for k in cross if k.startswith(PAST))].shape[1::2]
    for k, name in enumerate(self_in):
        feeds[name] = past[k] if past is not None else np.zeros((1, h, 0, dh), np.float32)
    return feeds


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))
