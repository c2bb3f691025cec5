"""Batch invariance through the engine: 2,000 words decoded alone, in shuffled batches of 32 and
under continuous batching, greedy and seeded sampling, on the served int8 and on ONNX Runtime's
dynamic int8 (derived from the same bundle's fp32 graphs). docs/BENCHMARKS.md, "Batch-invariant int8".

    PYTHONPATH=. .venv/bin/python docs/bench/int8_engine_invariance.py --out docs/bench/int8_engine_invariance.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from export.bundle import write_manifest
from export.variants import quantize_int8_dynamic
from service.bundle import load_bundle
from service.engine import DecodingOptions, Engine
from training.data import load_examples


def words(n_test: int, n_pseudo: int, seed: int = 0) -> list[str]:
    """Test-split words and letter strings no dictionary has."""
    rng = random.Random(seed)
    test = rng.sample(sorted({e.source for e in load_examples("cmudict", "test")}), n_test)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return test + ["".join(rng.choice(letters) for _ in range(rng.randint(1, 16))) for _ in range(n_pseudo)]


def differing(engine: Engine, items: list[list[int]], opts: list[DecodingOptions]) -> dict:
    alone = [r.token_ids for r in engine.generate(items, opts, batch_size=1)]
    order = list(range(len(items)))
    random.Random(1).shuffle(order)
    shuffled = engine.generate([items[i] for i in order], [opts[i] for i in order], batch_size=32, sort=False)
    batched: list = [None] * len(items)
    for i, r in zip(order, shuffled):
        batched[i] = r.token_ids
    refill = [r.token_ids for r in engine.generate(items, opts, batch_size=32, refill=True, sort=False)]
    return {
        "batched_32": sum(a != b for a, b in zip(batched, alone)),
        "continuous_32": sum(a != b for a, b in zip(refill, alone)),
        "inputs": len(items),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=Path("models/g2p-en"))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    report: dict = {"loadavg_start": os.getloadavg(), "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        dynamic = Path(tmp) / "dynamic"
        shutil.copytree(args.bundle, dynamic)
        meta = json.loads((dynamic / "bundle.json").read_text())
        for graph in ("encoder", "decoder"):
            quantize_int8_dynamic(dynamic / meta["variants"]["fp32"][graph], dynamic / meta["variants"]["int8"][graph])
        write_manifest(dynamic, meta)
        texts = words(1000, 1000)
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
