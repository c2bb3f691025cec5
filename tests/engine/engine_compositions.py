"""Decode the same requests alone, in shuffled batches and under continuous batching, through the
engine, and keep each request's ids and the logits its row got at every step.

Batch invariance through the engine is the promise that a request's answer does not depend on
the traffic beside it; tests/engine/test_invariance.py holds the engine to it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from attnserve.service.engine.engine import DecodingOptions, Engine

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def invariance_words(n_test: int, n_pseudo: int, seed: int = 0) -> list[str]:
    """`n_test` CMUdict test-split words, then `n_pseudo` letter strings (1-16 letters) no dictionary
    has, both drawn deterministically from `seed`."""
    from attnserve.training.data import load_examples  # torch-free, but only the callers that want words need it

    rng = random.Random(seed)
    test = rng.sample(sorted({e.source for e in load_examples("cmudict", "test")}), n_test)
    return test + ["".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 16))) for _ in range(n_pseudo)]


@dataclass
class Decoded:
    """One composition's outcome, in input order: ids, and each row's logits per step [steps, V]."""

    token_ids: list[list[int]]
    logits: list[np.ndarray] | None
    mixed_steps: int = 0  # decoder steps where a row took its first step beside rows already decoding
    batch_sizes: list[int] = field(default_factory=list)  # rows in use at each step


def decode(
    engine: Engine,
    items: list[list[int]],
    options: list[DecodingOptions],
    batch_size: int,
    refill: bool = False,
    order: list[int] | None = None,
    logits: bool = False,
) -> Decoded:
    """engine.generate on `items` taken in `order` (default: input order), results in input order.

    With `logits`, engine.run_step is wrapped for this call to copy each live row's logits
    (the decoder's output before any token choice) to that row's request. One row per request.
    """
    order = list(range(len(items))) if order is None else order
    started: list = []  # generations in the order the engine started them, which is `order`
    per_gen: dict[int, list[np.ndarray]] = {}
    counts = {"mixed": 0, "sizes": []}
    run_step, start = engine.run_step, engine.start

    def recording_start(pairs):
        gens, sources = start(pairs)
        started.extend(gens)
        return gens, sources

    def recording_run_step(batch):
        out, next_tokens = run_step(batch)
        live = [(i, row.generation) for i, row in enumerate(batch.rows) if row is not None]
        first = [len(per_gen.setdefault(id(g), [])) == 0 for _, g in live]
        counts["mixed"] += any(first) and not all(first)
        counts["sizes"].append(len(live))
        if logits:
            for i, g in live:
                per_gen[id(g)].append(out[i].copy())
        else:
            for _, g in live:
                per_gen[id(g)].append(None)  # only counted: tells first steps from later ones
        return out, next_tokens

    engine.run_step, engine.start = recording_run_step, recording_start
    try:
        inputs, opts = [items[i] for i in order], [options[i] for i in order]
        results = engine.generate(inputs, opts, batch_size=batch_size, refill=refill, sort=False)
    finally:
        del engine.run_step, engine.start  # back to the class's methods
    ids: list = [None] * len(items)
    rows: list = [None] * len(items)
    for i, r, g in zip(order, results, started, strict=True):
        assert list(g.source_ids) == list(items[i]), "the engine started requests out of order"
        ids[i] = r.token_ids
        rows[i] = np.stack(per_gen[id(g)]) if logits else None
    return Decoded(ids, rows if logits else None, counts["mixed"], counts["sizes"])


def three_ways(
    engine: Engine,
    items: list[list[int]],
    options: list[DecodingOptions],
    batch_size: int = 32,
    seed: int = 1,
    logits: bool = False,
) -> dict[str, Decoded]:
    """The same requests decoded "alone" (batch 1), "batched" (shuffled, in batches of
    `batch_size` that start together) and "continuous" (shuffled the other way, a request joins as
    soon as a row is free, so rows join while others decode, with other past and source lengths)."""
    shuffled = list(range(len(items)))
    random.Random(seed).shuffle(shuffled)
    return {
        "alone": decode(engine, items, options, 1, logits=logits),
        "batched": decode(engine, items, options, batch_size, order=shuffled, logits=logits),
        "continuous": decode(engine, items, options, batch_size, refill=True, order=shuffled[::-1], logits=logits),
    }


def logit_diff(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, float]:
    """(largest |difference|, largest |difference| / the row's largest |logit| at that step)
    between two compositions' logits, over every request and step; (0.0, 0.0) is bitwise equal."""
    worst_abs = worst_rel = 0.0
    for x, y in zip(a, b, strict=True):
        diff = np.abs(x.astype(np.float64) - y)  # [steps, V]
        worst_abs = max(worst_abs, float(diff.max(initial=0.0)))
        scale = np.maximum(np.abs(x.astype(np.float64)).max(axis=-1, keepdims=True), np.finfo(np.float32).tiny)
        worst_rel = max(worst_rel, float((diff / scale).max(initial=0.0)))
    return worst_abs, worst_rel
