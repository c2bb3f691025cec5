"""The int8 gate: whether int8 becomes the CPU default, decided on measured dev accuracy, speed at batch 1 and 32,
and batch invariance (`build` and `requantize` run it on the bundle they are writing)."""

from __future__ import annotations

import json
from pathlib import Path

from attnserve.export.checks.invariance import InPlaceSteps, batch_invariance
from attnserve.export.checks.speed import bench_engine_speed
from attnserve.export.errors import BuildError
from attnserve.export.pipeline.manifest import PARITY_CORPUS
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import Engine
from attnserve.training.evaluate import evaluate_engine

INT8_MAX_WER_LOSS = 0.5  # percentage points of dev WER int8 may lose against fp32
INT8_MIN_SPEEDUP = 1.05  # and it must be at least this much faster, at batch 1 and at batch 32
# and a row's outputs must be the same alone and in padded batches of 32 (export/checks/invariance.py): exactly,
# since any difference, however small, can flip an int8 rounding step and grow to 1e-2 in the logits
INT8_MAX_INVARIANCE_DIFF = 0.0


def int8_gate(bundle_dir: Path, train_cfg: dict, eval_limit: int, threads: int | None, log=print) -> dict:
    """Dev WER of fp32 and int8 through the engine, their speed at batch 1 and 32, and int8's batch
    invariance on the parity corpus.

    int8 becomes the CPU default only if it loses at most INT8_MAX_WER_LOSS WER points AND is
    at least INT8_MIN_SPEEDUP times faster at both batch sizes (int8 is not always faster for
    small matrices; measure, don't assume) AND a row's outputs do not depend on its batch.
    """
    bundle = load_bundle(bundle_dir)
    engines = {v: Engine(bundle, variant=v, provider="cpu", threads=threads) for v in ("fp32", "int8")}
    dataset = train_cfg.get("dataset")
    dev = {}
    for v, engine in engines.items():
        strip = bool(train_cfg.get("strip_stress", False))
        dev[v] = evaluate_engine(engine, dataset, "dev", eval_limit or None, strip, bundle.meta["task"])
        dev[v].pop("by_length", None)
        log(f"[export] dev {v}: " + ", ".join(f"{k}={x:.2f}" for k, x in dev[v].items() if isinstance(x, float)))
    speed = bench_engine_speed(engines, dataset, train_cfg.get("strip_stress", False))
    corpus = json.loads((bundle.dir / bundle.meta.get("parity_corpus", PARITY_CORPUS)).read_text())
    enc, dec = bundle.graph_paths("int8")
    cfg = bundle.config
    vocab = int(cfg["tgt_vocab_size"])
    if bundle.kv_cache("int8") != "in_place":  # build and requantize write int8 as the v2 decoder before the gate
        raise BuildError(f"{bundle.dir}: the int8 gate weighs the v2 int8 decoder; variant int8 is a v1 graph")
    steps = InPlaceSteps(enc, dec, bundle.n_layers, bundle.max_target_len, vocab)
    invariance = batch_invariance(steps, corpus["source_ids"], pad_id=cfg["pad_id"])
    decision = int8_decision(bundle.meta["task"], dev["fp32"], dev["int8"], speed, invariance)
    decision["threads"] = engines["fp32"].threads
    log(f"[export] int8 gate: {decision}")
    return {
        "fp32_dev": dev["fp32"],
        "int8_dev": dev["int8"],
        "speed": speed,
        "decision": decision,
        "int8_is_cpu_default": decision["accurate_enough"] and decision["faster"] and decision["batch_invariant"],
    }


def int8_decision(
    task: str, fp32_dev: dict, int8_dev: dict, speed: dict[str, dict[str, float]], invariance: dict | None = None
) -> dict:
    """The gate itself: int8 may lose at most INT8_MAX_WER_LOSS points of the task's metric (WER for
    G2P, exact match otherwise), must be INT8_MIN_SPEEDUP times faster at EVERY measured batch size,
    and its rows must differ alone and batched by at most INT8_MAX_INVARIANCE_DIFF (`invariance`:
    export/checks/invariance.py's figures; without them int8 is not invariant)."""
    metric, higher_better = ("wer", False) if task == "g2p" else ("exact_match", True)
    loss = (fp32_dev[metric] - int8_dev[metric]) if higher_better else (int8_dev[metric] - fp32_dev[metric])
    speedups = {b: speed["int8"][b] / speed["fp32"][b] for b in speed["fp32"]}
    return {
        "metric": metric,
        "loss_points": round(loss, 3),
        "max_loss_points": INT8_MAX_WER_LOSS,
        "speedup_vs_fp32": {k: round(v, 3) for k, v in speedups.items()},
        "min_speedup": INT8_MIN_SPEEDUP,
        "accurate_enough": loss <= INT8_MAX_WER_LOSS,
        "faster": all(x >= INT8_MIN_SPEEDUP for x in speedups.values()),
        "batch_invariant": invariance is not None and invariance["max_abs_diff"] <= INT8_MAX_INVARIANCE_DIFF,
        "invariance": invariance,
        "max_invariance_diff": INT8_MAX_INVARIANCE_DIFF,
    }
