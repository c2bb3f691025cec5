"""The score below which a model answer is flagged as a guess: `bundle.json`'s `confidence`.

A word the lexicon does not hold is answered by the model, and its answer carries a score: the mean raw
log-probability of its tokens, the end token included (the n-best ranking rule). The threshold is the score of
the worst `share` of the model's answers on the dev split's words (the served CPU variant, greedy), so about that
share of new words is flagged `guessed` wherever the dev words are like the user's. The test split then says how
many answers it flags, and how many of the wrong ones: both go into bundle.json beside the threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from attnserve.service.engine.bundle import load_bundle, write_bundle_json
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.training.data import load_examples, strip_stress

GUESS_SHARE = 0.10  # the share of the dev split's model answers flagged
SCORE = "mean_logprob"  # what the threshold compares: the answer's `score`


def _scored(engine: Engine, dataset: str, split: str, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(score, right without stress) of the greedy answer to each word of `split`."""
    examples = load_examples(dataset, split, False, limit)
    options = DecodingOptions(max_new_tokens=engine.max_target_len, logprobs=True)
    results = engine.generate([e.source for e in examples], options, batch_size=64, refill=True)
    scores = np.array([r.hypotheses[0].score for r in results], dtype=np.float64)
    right = np.array([strip_stress(r.text) in {strip_stress(t) for t in e.targets} for r, e in zip(results, examples)])
    return scores, right


def guess_threshold(
    bundle_dir: Path, share: float = GUESS_SHARE, limit: int | None = None, threads: int = 1, log: Callable = print
) -> dict:
    """bundle.json's `confidence` for the bundle in `bundle_dir`: the threshold chosen on the dev split, and what it
    flags on the test split."""
    if not 0 < share < 1:
        raise ValueError(f"share must be between 0 and 1, not {share}")
    bundle = load_bundle(bundle_dir)
    if bundle.meta.get("task", "g2p") != "g2p":
        raise ValueError("a guess threshold is chosen on a pronouncing dictionary's words: this bundle's task is not g2p")
    dataset = bundle.meta.get("dataset", "cmudict")
    engine = Engine(bundle, threads=threads)
    dev_scores, _ = _scored(engine, dataset, "dev", limit)
    threshold = float(np.quantile(dev_scores, share))
    test_scores, test_right = _scored(engine, dataset, "test", limit)
    flagged = test_scores < threshold
    wrong = ~test_right
    test = {
        "words": int(len(test_scores)),
        "flagged": round(float(flagged.mean()), 4),
        "wrong": round(float(wrong.mean()), 4),
        "wrong_flagged": round(float(flagged[wrong].mean()) if wrong.any() else 0.0, 4),
        "flagged_wrong": round(float(wrong[flagged].mean()) if flagged.any() else 0.0, 4),
    }
    log(
        f"[confidence] threshold {threshold:.4f} ({SCORE}, the worst {share:.0%} of {len(dev_scores)} dev answers); "
        f"on {test['words']} test words it flags {test['flagged']:.1%} of the answers and {test['wrong_flagged']:.1%} "
        f"of the wrong ones ({test['flagged_wrong']:.1%} of those it flags are wrong)"
    )
    return {
        "score": SCORE,
        "threshold": round(threshold, 6),
        "share": share,
        "chosen_on": {"split": "dev", "words": int(len(dev_scores)), "variant": engine.variant},
        "test": test,
    }


def add_confidence(bundle_dir: Path, share: float = GUESS_SHARE, limit: int | None = None, log: Callable = print) -> dict:
    """Write `confidence` into the bundle's bundle.json (graphs untouched); returns the new bundle.json."""
    bundle_dir = Path(bundle_dir)
    meta = dict(load_bundle(bundle_dir).meta)
    meta["confidence"] = guess_threshold(bundle_dir, share, limit, log=log)
    write_bundle_json(bundle_dir, meta)
    load_bundle(bundle_dir)  # the service's own loader must accept what was written
    return meta
