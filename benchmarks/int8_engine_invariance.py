"""Batch invariance through the engine: 2,000 words decoded alone, in shuffled batches of 32 and
under continuous batching, greedy and seeded sampling, on the served int8 and on ONNX Runtime's
dynamic int8 (derived from the same bundle's fp32 graphs). benchmarks/HISTORY.md, "The int8 gate".
The words and the three compositions are benchmarks/engine_compositions.py's, which the CI test
tests/engine/test_invariance.py runs too.

    .venv/bin/python -m benchmarks.int8_engine_invariance --out benchmarks/results/int8_engine_invariance.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from attnserve.export.graphs.variants import quantize_int8_dynamic
from attnserve.export.pipeline.manifest import write_manifest
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from benchmarks.engine_compositions import invariance_words, three_ways
from benchmarks.measure import cpu_model


def differing(engine: Engine, items: list[list[int]], opts: list[DecodingOptions]) -> dict:
    """How many answers differ from the same input decoded alone, in batches of 32 and continuously."""
    runs = three_ways(engine, items, opts, batch_size=32)
    alone = runs["alone"].token_ids
    return {
        "batched_32": sum(a != b for a, b in zip(runs["batched"].token_ids, alone)),
        "continuous_32": sum(a != b for a, b in zip(runs["continuous"].token_ids, alone)),
        "inputs": len(items),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=Path("models/g2p-en"))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    report: dict = {"cpu": cpu_model(), "loadavg_start": os.getloadavg(), "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        dynamic = Path(tmp) / "dynamic"
        shutil.copytree(args.bundle, dynamic)
        meta = json.loads((dynamic / "bundle.json").read_text())
        for graph in ("encoder", "decoder"):
            quantize_int8_dynamic(dynamic / meta["variants"]["fp32"][graph], dynamic / meta["variants"]["int8"][graph])
        write_manifest(dynamic, meta)
        texts = invariance_words(1000, 1000)
        for name, bundle_dir in (("int8", args.bundle), ("int8-dynamic", dynamic)):
            engine = Engine(load_bundle(bundle_dir), variant="int8", provider="cpu", threads=1)
            items = [engine.encode_text(w) for w in texts]
            cases = {
                "greedy": [DecodingOptions(max_new_tokens=48)] * len(items),
                "seeded": [DecodingOptions(max_new_tokens=48, do_sample=True, seed=i) for i in range(len(items))],
            }
            report["results"][name] = {case: differing(engine, items, opts) for case, opts in cases.items()}
            print(name, json.dumps(report["results"][name]), flush=True)
    report["loadavg_end"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
