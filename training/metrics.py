"""Task metrics: G2P word/phoneme error rates, and generic sequence metrics.

A G2P word is correct if the output equals any reference; PER is the edit
distance to the closest reference over that reference's length (summed over
words, as the g2p literature reports it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from rapidfuzz.distance import Levenshtein

from attnserve.training.data import strip_stress


def _per_word(hyp: str, refs: list[str]) -> tuple[bool, int, int]:
    """-> (correct, edits to the closest reference, that reference's length)."""
    h = hyp.split()
    best = None
    for ref in refs:
        r = ref.split()
        d = Levenshtein.distance(h, r)
        if best is None or (d, len(r)) < best:
            best = (d, len(r))
    assert best is not None
    return hyp in refs, best[0], best[1]


def g2p_metrics(hyps: list[str], refs: list[list[str]]) -> dict:
    """WER and PER in percent, with and without stress."""
    out: dict = {"words": len(hyps)}
    for suffix, norm in (("", lambda s: s), ("_no_stress", strip_stress)):
        wrong = edits = ref_len = 0
        for hyp, rs in zip(hyps, refs):
            ok, d, n = _per_word(norm(hyp), list(dict.fromkeys(norm(r) for r in rs)))
            wrong += not ok
            edits += d
            ref_len += n
        out[f"wer{suffix}"] = 100.0 * wrong / max(1, len(hyps))
        out[f"per{suffix}"] = 100.0 * edits / max(1, ref_len)
    return out


def g2p_metrics_by_length(sources: list[str], hyps: list[str], refs: list[list[str]]) -> dict:
    """`g2p_metrics` per source length band: {"1-4": {"words": n, "wer": x, "per": y, ...}, ...}."""
    bands = ((1, 4), (5, 7), (8, 10), (11, 99))
    groups: dict[str, tuple[list[str], list[list[str]]]] = defaultdict(lambda: ([], []))
    for src, hyp, rs in zip(sources, hyps, refs):
        band = next(f"{lo}-{hi}" if hi < 99 else f"{lo}+" for lo, hi in bands if lo <= len(src) <= hi)
        groups[band][0].append(hyp)
        groups[band][1].append(rs)
    return {band: g2p_metrics(*groups[band]) for band in sorted(groups)}


def sequence_metrics(hyps: list[str], refs: list[list[str]], tokenize: Callable[[str], list[str]] | None = None) -> dict:
    """For non-G2P data: exact match, token accuracy and chrF, in percent.

    Token accuracy is position-wise against the first reference, over the
    longer of the two; `tokenize` should be the target tokenizer's (a char-level
    target has no spaces to split on), whitespace splitting by default.
    """
    import sacrebleu

    tokenize = tokenize or str.split
    exact = sum(h in rs for h, rs in zip(hyps, refs))
    correct = total = 0
    for h, rs in zip(hyps, refs):
        ht, rt = tokenize(h), tokenize(rs[0])
        correct += sum(a == b for a, b in zip(ht, rt))
        total += max(len(ht), len(rt))
    first_refs = [rs[0] for rs in refs]
    chrf = sacrebleu.corpus_chrf(hyps, [first_refs]).score
    return {
        "examples": len(hyps),
        "exact_match": 100.0 * exact / max(1, len(hyps)),
        "token_accuracy": 100.0 * correct / max(1, total),
        "chrf": chrf,
    }


def task_metrics(
    task: str,
    sources: list[str],
    hyps: list[str],
    refs: list[list[str]],
    tokenize: Callable[[str], list[str]] | None = None,
) -> dict:
    """The task's metrics: "g2p" -> WER/PER (phonemes are whitespace-separated); else sequence metrics."""
    if task == "g2p":
        m = g2p_metrics(hyps, refs)
        m["by_length"] = g2p_metrics_by_length(sources, hyps, refs)
        return m
    return sequence_metrics(hyps, refs, tokenize)
