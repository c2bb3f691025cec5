"""The parity suite: what a bundle must prove before anything serves it.

1. Per graph, at (B, S) = (1,1), (2,7), (3,1), (4,11) and past lengths 0 and
   5 (rows of one batch with different real past lengths): ONNX Runtime fp32
   within 1e-4 of PyTorch, and every output the right size (no frozen axis).
2. Step-by-step cached logits equal the full teacher-forced logits.
3. Greedy ids of the service's engine identical to the PyTorch reference on a
   corpus of >= 200 inputs, one at a time, in padded batches, and under
   continuous batching (rows joining at different steps).
4. Seeded sampling: the same ids as the reference.
5. Teacher-forced steps: on every parity input, TF_STEPS cached steps over given tokens (the reference
   answer, then fixed filler tokens), so the check does not depend on how long the model's answers
   are: logits within 1e-4 of PyTorch's full teacher-forced forward, the same argmax.
6. The proof has power: either the free-running answers say something (mean output length >= 5,
   >= 100 distinct outputs), or, for a model whose answers are short or drawn from few labels, the
   teacher-forced logits move with the input (a graph that mixed up its inputs would show).
Plus: fp16 on CPU within 1e-2 of fp32 relative to the largest logit (at least 1), int8's greedy agreement with fp32.

With the run directory the reference is recomputed with PyTorch; without it the
reference ids recorded in the bundle at build time (parity_corpus.json) are used,
and the numerical checks compare cached steps with the graph's own full forward.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from attnserve.export.checks.corpus import (
    BEAM_WIDTH,
    MIN_CORPUS,
    SAMPLING_CASES,
    beam_options,
    reference_outputs,
    sampling_options,
)
from attnserve.export.checks.graph_parity import TOL_FP32, cached_vs_full, graph_parity, teacher_forced_parity
from attnserve.export.checks.variant_parity import TOL_FP16, fp16_check, int8_agreement, v2_parity
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine

MIN_MEAN_LEN = 5.0
MIN_DISTINCT = 100
MIN_SOURCE_SPREAD = 1.0  # the first step's logits must move by this much (of some token, across inputs)
TOL_SCORE = 1e-4  # hypothesis scores (mean log-probability), ONNX Runtime vs PyTorch


# ---- decoding checks ----------------------------------------------------------------------
def count_mismatches(results, expected: list[list[int]]) -> int:
    return sum(r.token_ids != e for r, e in zip(results, expected))


def greedy_parity(engine: Engine, corpus: dict) -> dict:
    ids, expected = corpus["source_ids"], corpus["greedy"]
    greedy = DecodingOptions(max_new_tokens=engine.max_target_len)
    single = engine.generate(ids, greedy, batch_size=1)
    padded = engine.generate(ids, greedy, batch_size=32)
    # input order, not sorted by length: rows of a step then differ in source as well as past length
    continuous = engine.generate(ids, greedy, batch_size=7, refill=True, sort=False)
    return {
        "inputs": len(ids),
        "mismatches_one_at_a_time": count_mismatches(single, expected),
        "mismatches_padded_batches_32": count_mismatches(padded, expected),
        "mismatches_continuous_batching_7": count_mismatches(continuous, expected),
        "mean_output_len": float(np.mean([len(x) for x in expected])) if expected else 0.0,
        "distinct_outputs": len({tuple(x) for x in expected}),
    }


def corpus_failures(g: dict, tf: dict | None = None) -> list[str]:
    """A parity proof needs enough inputs and a check with power: free-running answers that say something
    (not eos at once), or, for short answers and labels, teacher-forced logits `tf` that move with the input.
    `tf` None: a bundle whose corpus predates the teacher-forced check."""
    out = []
    if g["inputs"] < MIN_CORPUS:
        out.append(f"parity corpus has {g['inputs']} inputs (< {MIN_CORPUS})")
    if g["mean_output_len"] >= MIN_MEAN_LEN and g["distinct_outputs"] >= MIN_DISTINCT:
        return out
    answers = (
        f"mean output length {g['mean_output_len']:.2f} (need {MIN_MEAN_LEN}), "
        f"{g['distinct_outputs']} distinct outputs (need {MIN_DISTINCT})"
    )
    if tf is None:
        out.append(
            f"model too trivial to prove parity by its answers alone: {answers}, and the bundle's parity corpus "
            "has no teacher-forced record: rebuild the bundle with attnserve-export build to record one"
        )
    elif tf["source_spread"] < MIN_SOURCE_SPREAD:
        out.append(
            f"parity cannot be proven: {answers}, and the first step's logits hardly depend on the input "
            f"(spread {tf['source_spread']:.3g} over {tf['inputs']} inputs, need {MIN_SOURCE_SPREAD}), so the model "
            "ignores what it reads: train it longer (check its dev figures), or pass --dataset FILE.tsv with more varied inputs"
        )
    return out


def sampling_parity(engine: Engine, corpus: dict) -> dict:
    ids = corpus["source_ids"][: len(corpus["sampled"])]
    opts = [sampling_options(i, engine.max_target_len) for i in range(len(ids))]
    results = engine.generate(ids, opts, batch_size=5, refill=True, sort=False)
    return {
        "inputs": len(ids),
        "cases": SAMPLING_CASES,
        "mismatches_continuous_batching_5": count_mismatches(results, corpus["sampled"]),
        "distinct_outputs": len({tuple(r.token_ids) for r in results}),
    }


def beam_parity(engine: Engine, corpus: dict) -> dict:
    """Beam search through ONNX Runtime against the PyTorch reference: the same hypotheses in the same
    order, scores within TOL_SCORE; one request at a time, and in continuous batches beside greedy
    and sampled rows."""
    ref = corpus["beam"]
    ids = corpus["source_ids"]
    beam = beam_options(engine.max_target_len)
    alone = engine.generate(ids, beam, batch_size=BEAM_WIDTH)
    # every third request is beam search; the others greedy or sampled: rows of all kinds share steps
    mixed_opts = [
        beam
        if i % 3 == 0
        else sampling_options(i, engine.max_target_len)
        if i % 3 == 1
        else DecodingOptions(max_new_tokens=engine.max_target_len)
        for i in range(len(ids))
    ]
    mixed = engine.generate(ids, mixed_opts, batch_size=13, refill=True, sort=False)
    out = {"inputs": len(ids), "width": ref["width"]}
    for name, results, which in (("alone", alone, range(len(ids))), ("continuous_batching_mixed", mixed, range(0, len(ids), 3))):
        mismatches, worst = 0, 0.0
        for i in which:
            hyps = results[i].hypotheses
            if [h.token_ids for h in hyps] != ref["hypotheses"][i]:
                mismatches += 1
                continue
            worst = max([worst, *(abs(h.score - r) for h, r in zip(hyps, ref["scores"][i]))])
        out[f"mismatches_{name}"] = mismatches
        out[f"score_max_abs_diff_{name}"] = worst
        out[f"checked_{name}"] = len(which)
    return out


def run_parity(bundle_dir: Path, model=None, threads: int | None = None, log=print) -> dict:
    """Every check; returns {"figures": {...}, "failures": [one line each]}."""
    bundle = load_bundle(bundle_dir)
    corpus = json.loads((Path(bundle_dir) / bundle.meta.get("parity_corpus", "parity_corpus.json")).read_text())
    failures: list[str] = []
    t0 = time.perf_counter()
    if model is not None:
        fresh = reference_outputs(model, corpus["source_ids"], bundle.length_bound if bundle.meta.get("length_bound") else None)
        if fresh["greedy"] != corpus["greedy"] or fresh["sampled"] != corpus["sampled"]:
            failures.append("the run's PyTorch outputs differ from the ones recorded in the bundle (bundle from another run?)")
        corpus = {**corpus, **fresh}
    engine = Engine(bundle, variant="fp32", provider="cpu", threads=threads)
    figures: dict = {"reference": "pytorch (recomputed from the run)" if model is not None else "recorded at build"}

    figures["graphs"] = graph_parity(engine, model)
    failures += figures["graphs"]["shape_problems"]
    for key in ("encoder_max_abs_diff", "decoder_logits_max_abs_diff", "decoder_present_max_abs_diff"):
        if figures["graphs"].get(key, 0.0) > TOL_FP32:
            failures.append(f"{key} = {figures['graphs'][key]:.2e} > {TOL_FP32}")
    log(f"[verify] graphs: {figures['graphs']}")

    figures["cached_vs_full"] = cached_vs_full(engine, corpus, model)
    for key, value in figures["cached_vs_full"].items():
        if key.endswith("max_abs_diff") and value > TOL_FP32:
            failures.append(f"{key} = {value:.2e} > {TOL_FP32}")
    log(f"[verify] cached vs full: {figures['cached_vs_full']}")

    g = figures["greedy"] = greedy_parity(engine, corpus)
    for key in ("mismatches_one_at_a_time", "mismatches_padded_batches_32", "mismatches_continuous_batching_7"):
        if g[key]:
            failures.append(f"greedy {key} = {g[key]} of {g['inputs']}")
    log(f"[verify] greedy: {g}")

    tf = None
    if "teacher_forced" in corpus:  # bundles built before it have no teacher-forced record
        tf = figures["teacher_forced"] = teacher_forced_parity(engine, corpus, model)
        diff_key = next(k for k in tf if k.startswith("max_abs_diff_"))
        if tf[diff_key] > TOL_FP32:
            failures.append(f"teacher-forced {diff_key} = {tf[diff_key]:.2e} > {TOL_FP32}")
        if tf["argmax_mismatches"]:
            failures.append(f"teacher-forced argmax differs at {tf['argmax_mismatches']} of {tf['positions']} positions")
        log(f"[verify] teacher-forced: {tf}")
    failures += corpus_failures(g, tf)

    sp = figures["sampling"] = sampling_parity(engine, corpus)
    if sp["mismatches_continuous_batching_5"]:
        failures.append(f"sampling mismatches = {sp['mismatches_continuous_batching_5']} of {sp['inputs']}")
    log(f"[verify] sampling: {sp}")

    if "beam" in corpus:  # bundles built before beam search have no beam references
        bp = figures["beam"] = beam_parity(engine, corpus)
        for key in ("alone", "continuous_batching_mixed"):
            if bp[f"mismatches_{key}"]:
                failures.append(f"beam search mismatches ({key}) = {bp[f'mismatches_{key}']} of {bp[f'checked_{key}']}")
            if bp[f"score_max_abs_diff_{key}"] > TOL_SCORE:
                failures.append(f"beam scores ({key}) differ by {bp[f'score_max_abs_diff_{key}']:.2e} > {TOL_SCORE}")
        log(f"[verify] beam search: {bp}")

    failures += variant_parity(bundle, corpus, figures, threads, log)
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    figures["passed"] = not failures
    return {"figures": figures, "failures": failures}


def variant_parity(bundle, corpus: dict, figures: dict, threads: int | None, log) -> list[str]:
    """The variants beside fp32 (fp16, int8, the v2 ones that run on the CPU), their figures added to `figures`;
    returns their failures."""
    failures: list[str] = []
    if "fp16" in bundle.variants:
        figures["fp16"] = fp16_check(bundle, threads)
        if not figures["fp16"]["ok"]:
            f16 = figures["fp16"]
            failures.append(
                f"fp16 logits differ from fp32 by {f16['max_abs_diff_logits_vs_fp32']:.2e} > {f16['tolerance']:.2e}"
                f" ({TOL_FP16} x the largest |logit|, at least 1)"
            )
        log(f"[verify] fp16: {figures['fp16']}")
    if "int8" in bundle.variants:
        figures["int8"] = int8_agreement(bundle, corpus, threads)
        log(f"[verify] int8: {figures['int8']}")
    for name in bundle.variants:  # v2 variants (in-place cache) that run on the CPU: fp16 is checked above
        if bundle.kv_cache(name) == "in_place" and name != "fp16":
            v2_engine = Engine(bundle, variant=name, provider="cpu", threads=threads)
            v2 = v2_parity(v2_engine, corpus, exact=name.startswith("fp32"))
            failures += v2.pop("failures")
            figures[f"v2_{name}"] = v2
            log(f"[verify] v2 {name}: {v2}")
    return failures
