"""Batch-invariant int8: the candidates compared on one bundle (benchmarks/HISTORY.md, "Batch-invariant int8").

Every candidate is derived from the bundle's own fp32 graphs into a scratch copy of the bundle:

- fp32: the graphs as exported;
- int8-dynamic: ONNX Runtime's dynamic quantization (one activation scale per tensor; the int8 of
  bundles built before);
- int8-row: per-row activation quantization, attention left as exported;
- int8-row-exact: per-row quantization and the order-exact attention (what `build` now writes);
- int8-row-exact-fp32-logits: the same with the logits projection kept in float32.

For each: graph-level batch invariance (export/checks/invariance.py, max |difference| of a row alone vs in
padded batches of 32), dev WER and greedy words differing from fp32 (through attnserve.service.engine.engine), and
the raw decoder step (session.run, 1 thread, P=8, S=10) at batch 1 and 32, candidates interleaved
round by round, median wall and thread-CPU time; then greedy tokens/s through the engine at 1 and 2
threads (export/checks/speed.py's bench_engine_speed, what the int8 gate measures: best of 3 interleaved
rounds, 48 words at batch 1, 256 at batch 32).

    .venv/bin/python -m benchmarks.int8_invariant --out benchmarks/results/int8_invariant.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from attnserve.export.checks.invariance import ConcatSteps, batch_invariance, cpu_session
from attnserve.export.checks.speed import bench_engine_speed
from attnserve.export.graphs.variants import quantize_int8, quantize_int8_dynamic
from attnserve.export.pipeline.manifest import write_manifest
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.training.evaluate import evaluate_engine
from benchmarks.measure import cpu_model

ENGINE_SPEED_CANDIDATES = ("fp32", "int8-dynamic", "int8-row", "int8-row-exact")


def make_candidates(bundle_dir: Path, work: Path) -> dict[str, Path]:
    """One scratch bundle per candidate, its int8 graphs replaced (fp32 serves as 'fp32')."""
    recipes = {
        "int8-dynamic": lambda s, d: quantize_int8_dynamic(s, d),
        "int8-row": lambda s, d: quantize_int8(s, d, exact_attention=False),
        "int8-row-exact": lambda s, d: quantize_int8(s, d),
        "int8-row-exact-fp32-logits": lambda s, d: quantize_int8(s, d, keep_fp32=("/lm_head/MatMul",)),
    }
    out = {"fp32": bundle_dir}
    for name, recipe in recipes.items():
        d = work / name
        shutil.copytree(bundle_dir, d)
        meta = json.loads((d / "bundle.json").read_text())
        for graph in ("encoder", "decoder"):
            recipe(d / meta["variants"]["fp32"][graph], d / meta["variants"]["int8"][graph])
        write_manifest(d, meta)
        out[name] = d
    return out


def decoder_feeds(batch: int, past: int, source: int, n_layers: int, heads: int, head_dim: int, vocab: int) -> dict:
    r = np.random.default_rng(0)
    feeds = {
        "input_ids": r.integers(4, vocab, (batch, 1)).astype(np.int64),
        "position_ids": np.full((batch, 1), past, np.int64),
        "decoder_attention_mask": np.ones((batch, past + 1), np.int64),
        "encoder_attention_bias": np.zeros((batch, 1, 1, source), np.float32),
    }
    for i in range(n_layers):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.decoder.{kv}"] = r.standard_normal((batch, heads, past, head_dim)).astype(np.float32)
            feeds[f"past_key_values.{i}.encoder.{kv}"] = r.standard_normal((batch, heads, source, head_dim)).astype(np.float32)
    return feeds


def step_speed(paths: dict[str, Path], cfg: dict, rounds: int) -> dict:
    """Raw decoder session.run, 1 thread, P=8, S=10: median ms (wall and thread CPU) per batch size."""
    sessions = {name: cpu_session(path, threads=1) for name, path in paths.items()}
    h = int(cfg["n_heads"])
    feeds = {
        b: decoder_feeds(b, 8, 10, int(cfg["n_decoder_layers"]), h, int(cfg["d_model"]) // h, int(cfg["tgt_vocab_size"]))
        for b in (1, 32)
    }
    calls = {1: 200, 32: 20}
    wall = {n: {b: [] for b in feeds} for n in sessions}
    cpu = {n: {b: [] for b in feeds} for n in sessions}
    for s in sessions.values():
        for b in feeds:
            for _ in range(20):
                s.run(None, feeds[b])
    for _ in range(rounds):  # interleaved: background load falls on every candidate alike
        for b, n_calls in calls.items():
            for name, s in sessions.items():
                t, c = time.perf_counter(), time.thread_time()
                for _ in range(n_calls):
                    s.run(None, feeds[b])
                wall[name][b].append((time.perf_counter() - t) / n_calls * 1e3)
                cpu[name][b].append((time.thread_time() - c) / n_calls * 1e3)
    return {
        name: {
            f"batch_{b}": {
                "wall_ms": round(statistics.median(wall[name][b]), 4),
                "cpu_ms": round(statistics.median(cpu[name][b]), 4),
            }
            for b in feeds
        }
        for name in sessions
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=Path("models/g2p-en"))
    p.add_argument("--rounds", type=int, default=15, help="interleaved speed rounds")
    p.add_argument("--dev-limit", type=int, default=0, help="dev words for WER (0 = all)")
    p.add_argument("--invariance-rows", type=int, default=256)
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    report: dict = {"cpu": cpu_model(), "cores": os.cpu_count(), "loadavg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        bundles = make_candidates(args.bundle, Path(tmp))
        meta = load_bundle(args.bundle).meta
        cfg = meta["config"]
        corpus = json.loads((args.bundle / meta["parity_corpus"]).read_text())
        sources = corpus["source_ids"][: args.invariance_rows]
        results: dict = {}
        fp32_ids = None
        for name, d in bundles.items():
            variant = "fp32" if name == "fp32" else "int8"
            files = load_bundle(d).meta["variants"][variant]
            enc, dec = d / files["encoder"], d / files["decoder"]
            steps = ConcatSteps(enc, dec, int(cfg["n_decoder_layers"]), int(cfg["tgt_vocab_size"]))
            inv = batch_invariance(steps, sources, pad_id=cfg["pad_id"])
            engine = Engine(load_bundle(d), variant=variant, provider="cpu", threads=1)
            dev = evaluate_engine(engine, meta["dataset"], "dev", args.dev_limit or None, meta["strip_stress"], meta["task"])
            greedy = DecodingOptions(max_new_tokens=engine.max_target_len)
            ids = [r.token_ids for r in engine.generate(corpus["source_ids"], greedy, batch_size=32)]
            fp32_ids = fp32_ids or ids
            results[name] = {
                "decoder_nodes": _nodes(dec),
                "invariance": inv,
                "dev": {k: v for k, v in dev.items() if k in ("words", "wer", "per")},
                "greedy_differing_from_fp32": sum(a != b for a, b in zip(ids, fp32_ids)),
                "greedy_inputs": len(ids),
            }
            print(name, json.dumps(results[name]), flush=True)
        speed = step_speed(
            {n: d / ("decoder.onnx" if n == "fp32" else "decoder.int8.onnx") for n, d in bundles.items()}, cfg, args.rounds
        )
        engine_speed = {}
        for threads in (1, 2):
            engines = {
                n: Engine(load_bundle(d), variant="fp32" if n == "fp32" else "int8", provider="cpu", threads=threads)
                for n, d in bundles.items()
                if n in ENGINE_SPEED_CANDIDATES
            }
            engine_speed[threads] = bench_engine_speed(engines, meta["dataset"], meta["strip_stress"])
            print(f"engine tokens/s, {threads} thread(s):", json.dumps(engine_speed[threads]), flush=True)
    for name in results:
        results[name]["step"] = speed[name]
        if name in ENGINE_SPEED_CANDIDATES:
            results[name]["engine_tokens_per_s"] = {f"threads_{t}": engine_speed[t][name] for t in engine_speed}
    report |= {"loadavg_end": os.getloadavg(), "candidates": results}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def _nodes(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


if __name__ == "__main__":
    main()
