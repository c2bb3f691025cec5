"""Batch invariance at the graph level: a row's outputs do not depend on the rest of its batch.

The service batches rows of different requests into one encoder call and one decoder step,
padded to the longest source (right padding, `attention_mask` 0 / `encoder_attention_bias`
-1e9) and the longest past (left padding, `decoder_attention_mask` 0). For the answers to be
the same whatever the traffic, each row must compute exactly what it computes alone. Here
every row is run alone (B = 1, no padding) and again inside a shuffled batch with extra
source and past padding filled with finite garbage, and the outputs are compared.

The past of each row is made by the decoder itself (T tokens at once from P = 0), so the
check needs nothing but the two graphs and some real source ids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from service.engine.names import (
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
from service.engine.runtime import session_options

MAX_PAST = 12  # past lengths drawn from 0..MAX_PAST
EXTRA_SOURCE_PAD = 3  # batched rows are padded this much beyond the longest source
EXTRA_PAST_PAD = 2  # and this much beyond the longest past


def cpu_session(path: Path, threads: int = 1) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])


def batch_invariance(
    encoder_path: Path,
    decoder_path: Path,
    source_ids: list[list[int]],
    n_layers: int,
    vocab_size: int,
    pad_id: int = 0,
    batch_size: int = 32,
    threads: int = 1,
    seed: int = 0,
) -> dict:
    """Max |difference| between each row alone and the same row in padded batches of `batch_size`.

    Returns {"rows", "batch_size", "encoder_max_abs_diff", "decoder_logits_max_abs_diff",
    "decoder_present_max_abs_diff", "max_abs_diff"}; 0.0 means bitwise identical.
    """
    enc, dec = cpu_session(encoder_path, threads), cpu_session(decoder_path, threads)
    rng = np.random.default_rng(seed)
    enc_names = [o.name for o in enc.get_outputs()]
    dec_names = [o.name for o in dec.get_outputs()]
    cross_out = present_names(n_layers, ENCODER)
    cross_in = past_names(n_layers, ENCODER)
    self_in = self_attention_inputs(n_layers)
    self_out = present_names(n_layers, DECODER)

    rows = []
    for ids in source_ids:  # alone: B = 1, no padding anywhere
        x = np.asarray([ids], np.int64)
        e = dict(zip(enc_names, enc.run(None, {INPUT_IDS: x, ATTENTION_MASK: np.ones_like(x)})))
        p = int(rng.integers(0, MAX_PAST + 1))
        tokens = rng.integers(4, vocab_size, p + 1).astype(np.int64)
        feeds = cross_feeds(e)
        if p:  # the row's own past: its first p tokens in one call from an empty cache
            first = decoder_feeds(feeds, tokens[None, :p], np.arange(p)[None], np.ones((1, p), np.int64), None, self_in)
            d = dict(zip(dec_names, dec.run(None, first)))
            past = [d[o] for o in self_out]
        else:
            past = None
        step = decoder_feeds(feeds, tokens[None, p:], np.array([[p]]), np.ones((1, p + 1), np.int64), past, self_in)
        out = dict(zip(dec_names, dec.run(None, step)))
        rows.append({"ids": ids, "enc": e, "p": p, "token": tokens[p], "past": step, "out": out})

    enc_diff = logit_diff = present_diff = 0.0
    order = rng.permutation(len(rows))
    for start in range(0, len(rows), batch_size):
        chunk = [rows[i] for i in order[start : start + batch_size]]
        b = len(chunk)
        s = max(len(r["ids"]) for r in chunk) + EXTRA_SOURCE_PAD
        p = max(r["p"] for r in chunk) + EXTRA_PAST_PAD
        x = np.full((b, s), pad_id, np.int64)
        mask = np.zeros((b, s), np.int64)
        for j, r in enumerate(chunk):
            x[j, : len(r["ids"])], mask[j, : len(r["ids"])] = r["ids"], 1
        e = dict(zip(enc_names, enc.run(None, {INPUT_IDS: x, ATTENTION_MASK: mask})))
        for j, r in enumerate(chunk):
            n = len(r["ids"])
            enc_diff = max(enc_diff, _diff(e[ENCODER_ATTENTION_BIAS][j, ..., :n], r["enc"][ENCODER_ATTENTION_BIAS][0]))
            for o in cross_out:
                enc_diff = max(enc_diff, _diff(e[o][j, :, :n], r["enc"][o][0]))
        # The decoder step gets each row's own alone-computed cache, padded with finite garbage
        # (what a reused slot holds in the engine): masked slots must not matter.
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
        for name in cross_in:
            h, dh = chunk[0]["past"][name].shape[1::2]
            arr = rng.standard_normal((b, h, s, dh)).astype(np.float32)
            for j, r in enumerate(chunk):
                arr[j, :, : len(r["ids"])] = r["past"][name][0]
            feeds[name] = arr
        for name in self_in:
            h, dh = chunk[0]["past"][name].shape[1::2]
            arr = rng.standard_normal((b, h, p, dh)).astype(np.float32)
            for j, r in enumerate(chunk):
                if r["p"]:
                    arr[j, :, p - r["p"] :] = r["past"][name][0]
            feeds[name] = arr
        out = dict(zip(dec_names, dec.run(None, feeds)))
        for j, r in enumerate(chunk):
            logit_diff = max(logit_diff, _diff(out[LOGITS][j], r["out"][LOGITS][0]))
            for o in self_out:
                present_diff = max(present_diff, _diff(out[o][j, :, p - r["p"] :], r["out"][o][0]))
    return {
        "rows": len(rows),
        "batch_size": batch_size,
        "encoder_max_abs_diff": enc_diff,
        "decoder_logits_max_abs_diff": logit_diff,
        "decoder_present_max_abs_diff": present_diff,
        "max_abs_diff": max(enc_diff, logit_diff, present_diff),
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
