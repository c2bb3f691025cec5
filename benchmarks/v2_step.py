"""The decoder step alone (no encoder, no engine): the served v2 int8 graph against the v1 int8 graph it replaced.

The synthetic model of `attnserve-bench` (default architecture, random weights, 136 target positions, its int8
written by the export code that builds real bundles). Each graph is called the way the engine calls it: v1
through `run_with_ort_values` with a past of P positions (the cache it concatenates grows with P), v2 through
its IOBinding over [B, H, 136, Dh] buffers with every row's past length P. Best-of median over rounds.

    taskset -c 1 .venv/bin/python -m benchmarks.v2_step --out benchmarks/results/v2_round8/step.json

Reports ms per step for B in {1, 32} and P in {8, 32, 128}, v2 / v1, and v2's step at P=128 over P=8 (the
issue's target: at most 1.15 at batch 1, since nothing copies the cache). Also counts each graph's nodes after
ONNX Runtime's optimisation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.export.bench import synthetic_run
from attnserve.export.checks.steps import StepRunner, v2_session
from attnserve.export.pipeline.v2 import optimized_node_count
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.names import DECODER, ENCODER, LOGITS, NEXT_TOKEN, past_names, present_names
from attnserve.service.engine.runtime import session_options
from benchmarks.measure import call_times, machine

MAX_LEN = 136
S = 8  # source positions (a word)


def v1_call(path: Path, b: int, p: int, n: int, h: int, dh: int):
    sess = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": np.full((b, 1), 5, np.int64),
        "position_ids": np.full((b, 1), p, np.int64),
        "decoder_attention_mask": np.ones((b, p + 1), np.int64),
        "encoder_attention_bias": np.zeros((b, 1, 1, S), np.float32),
    }
    for name in past_names(n, DECODER):
        feeds[name] = rng.standard_normal((b, h, p, dh)).astype(np.float32)
    for name in past_names(n, ENCODER):
        feeds[name] = rng.standard_normal((b, h, S, dh)).astype(np.float32)
    wrappers = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}  # they keep the arrays alive
    values = {k: w._ortvalue for k, w in wrappers.items()}
    outputs = [LOGITS, *present_names(n, DECODER), NEXT_TOKEN]
    run = sess._sess.run_with_ort_values
    return lambda: (wrappers, run(values, outputs, None))


def v2_call(path: Path, b: int, p: int, n: int, h: int, dh: int):
    runner = StepRunner(v2_session(path), n, b, MAX_LEN)
    rng = np.random.default_rng(0)
    for c in runner.cache:
        c[...] = rng.standard_normal(c.shape).astype(np.float32)
    runner.set_cross(np.zeros((b, 1, 1, S), np.float32), [rng.standard_normal((b, h, S, dh)).astype(np.float32)] * (2 * n))
    runner.step(np.full(b, 5), np.full(b, p))  # binds the ids and lengths; the calls below rerun the same binding
    run, binding = runner.session._sess.run_with_iobinding, runner.binding._iobinding
    return lambda: (runner, run(binding, None))  # the runner keeps the bound buffers alive


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _, bundle_dir = synthetic_run(Path(tmp) / "bundle", max_target_len=MAX_LEN)
        bundle = load_bundle(bundle_dir)
        cfg = bundle.config
        n, h = bundle.n_layers, int(cfg["n_heads"])
        dh = int(cfg["d_model"]) // h
        v1_path, v2_path = bundle.graph_paths("int8-v1")[1], bundle.graph_paths("int8")[1]
        nodes = {"v1": optimized_node_count(v1_path)["total"], "v2": optimized_node_count(v2_path)["total"]}
        cells = []
        for b in (1, 32):
            for past in (8, 32, 128):
                calls = {"v1": v1_call(v1_path, b, past, n, h, dh), "v2": v2_call(v2_path, b, past, n, h, dh)}
                rounds: dict[str, list[float]] = {k: [] for k in calls}
                k = args.calls if b == 1 else max(20, args.calls // 10)
                for _ in range(args.rounds):  # interleaved: background load hits both alike
                    for name, fn in calls.items():
                        rounds[name].append(statistics.median(call_times(fn, k, warm_up=10)))
                ms = {name: round(1000 * min(v), 4) for name, v in rounds.items()}
                cells.append(
                    {"batch": b, "past": past, "ms_v1": ms["v1"], "ms_v2": ms["v2"], "v2_over_v1": round(ms["v2"] / ms["v1"], 3)}
                )
                print(json.dumps(cells[-1]), flush=True)
    by = {(c["batch"], c["past"]): c for c in cells}
    report = {
        "command": "python -m benchmarks.v2_step",
        "machine": machine(),
        "nodes_after_optimisation": nodes,
        "cells": cells,
        "v2_past128_over_past8": {b: round(by[(b, 128)]["ms_v2"] / by[(b, 8)]["ms_v2"], 3) for b in (1, 32)},
    }
    print(json.dumps({k: report[k] for k in ("nodes_after_optimisation", "v2_past128_over_past8")}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
