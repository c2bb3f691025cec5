"""Where a beam-search step's time goes: the decoder call, and the engine's Python around it.

Width 4, forced lengths (min_new_tokens = max_new_tokens = 32, as attnserve-bench --beam 4 runs), the default
model's int8 variant, one ONNX Runtime thread; `--requests` beam searches in one batch (4 rows each). Each
section is timed by a wrapper (about 0.2 us each); microseconds per step, over every step of `--runs`
generations after 3 warm-up ones.

    taskset -c 1 .venv/bin/python -m benchmarks.beam_step_python --requests 32
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import attnserve.service.engine.engine as engine_module
import attnserve.service.engine.slots as slots_module
import attnserve.service.engine.step as step_module
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from benchmarks.measure import cpu_model
from benchmarks.step_python import timing

BUNDLE = Path(__file__).resolve().parents[1] / "models" / "g2p-en"
WORDS = ["phonetics", "attention", "zebra", "characteristically", "onnx", "runtime", "hello", "cat"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1)
    ap.add_argument("--runs", type=int, help="generations timed (default: 200 / requests)")
    ap.add_argument("--variant", default="int8")
    args = ap.parse_args()
    spent: collections.Counter = collections.Counter()

    def timed(owner, name: str, key: str) -> None:
        setattr(owner, name, timing(getattr(owner, name), spent, key))

    engine = Engine(load_bundle(BUNDLE), variant=args.variant, threads=1)
    timed(slots_module.SlotBatch, "reorder", "cache gather (reorder)")  # every variant's batch (the one beam reorder)
    timed(step_module, "update_searches", "beam search update")  # every search of a width, one call (choose_tokens')
    timed(step_module, "place_beams", "beam rows placed")
    timed(step_module, "log_softmax", "log_softmax")
    timed(engine_module, "choose_tokens", "token choice, all")
    timed(engine, "run_decoder", "decoder call (ONNX Runtime)")
    ids = [engine.encode_text(w) for w in (WORDS * (args.requests // len(WORDS) + 1))[: args.requests]]
    opts = DecodingOptions(max_new_tokens=32, min_new_tokens=32, num_beams=4)
    for _ in range(3):
        engine.generate(ids, opts, batch_size=4 * args.requests)
    runs = args.runs or max(1, 200 // args.requests)
    spent.clear()
    t = time.perf_counter()
    for _ in range(runs):
        engine.generate(ids, opts, batch_size=4 * args.requests)
    steps = runs * 32
    report = {
        "requests": args.requests,
        "rows": 4 * args.requests,
        "cpu": cpu_model(),
        "us_per_step_total": round((time.perf_counter() - t) / steps * 1e6, 1),
    }
    report.update({f"us_per_step: {k}": round(v / steps * 1e6, 1) for k, v in spent.most_common()})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
