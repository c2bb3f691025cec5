"""Beam search's step, the vectorised search against the per-search one it replaced, A B A B in one process.

The per-search search is benchmarks/beam_reference.py (the test suite's reference: its BeamSearch, its step
and its row placement, where every beam keeps its row and takes its parent's cache when the parent was another
row). Both run through the same engine, on the same words, interleaved, so a busy machine disturbs both alike.
Width 4, forced lengths (min_new_tokens = max_new_tokens, as `attnserve-bench --beam 4` runs), the default
model's int8 (the served v2 decoder), one ONNX Runtime thread; CPU time of the process per step, best of the
rounds; and the rows whose cache was copied per step.

    taskset -c 1 .venv/bin/python -m benchmarks.beam_ab --out benchmarks/results/beam_vectorised/inprocess_ab.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import attnserve.service.engine.beam as beam
import attnserve.service.engine.rows as rows_module
import attnserve.service.engine.slots as slots_module
import attnserve.service.engine.step as step_module
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from benchmarks import beam_reference as reference
from benchmarks.measure import cpu_model

ROOT = Path(__file__).resolve().parents[1]

WORDS = ["phonetics", "attention", "zebra", "characteristically", "onnx", "runtime", "hello", "cat"]
KINDS = {"per-search": reference, "vectorised": beam}


def use(module) -> None:
    """The engine's beam search from `module`: its search class, its step and its row placement."""
    rows_module.BeamSearch = module.BeamSearch
    step_module.update_searches = module.update_searches
    step_module.place_beams = module.place_beams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engine = Engine(load_bundle(ROOT / "models" / "g2p-en"), variant="int8", threads=1)
    copied: list[int] = []
    reorder = slots_module.SlotBatch.reorder

    def counting(self, dest, src):
        copied.append(len(dest))
        return reorder(self, dest, src)

    slots_module.SlotBatch.reorder = counting
    opts = DecodingOptions(max_new_tokens=args.tokens, min_new_tokens=args.tokens, num_beams=4)
    report = {"cpu": cpu_model(), "tokens": args.tokens, "rounds": args.rounds, "cells": []}
    for requests, runs in ((1, 20), (32, 2)):
        ids = [engine.encode_text(w) for w in (WORDS * 4)[:requests]]
        best = dict.fromkeys(KINDS, float("inf"))
        rows = {}
        for _ in range(args.rounds):
            for name, module in KINDS.items():
                use(module)
                engine.generate(ids, opts, batch_size=4 * requests)  # warm
                copied.clear()
                t = time.process_time()
                for _ in range(runs):
                    engine.generate(ids, opts, batch_size=4 * requests)
                best[name] = min(best[name], (time.process_time() - t) / runs / args.tokens * 1000)
                rows[name] = sum(copied) / (runs * args.tokens)
        cell = {
            "requests": requests,
            "rows": 4 * requests,
            **{f"cpu_ms_per_step {k}": round(v, 3) for k, v in best.items()},
            "vectorised / per-search": round(best["vectorised"] / best["per-search"], 3),
            **{f"rows copied per step {k}": round(v, 1) for k, v in rows.items()},
        }
        report["cells"].append(cell)
        print(json.dumps(cell), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
