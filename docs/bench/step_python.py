"""Where a batch-1 decode step's time goes: inside ONNX Runtime, and the engine's Python around it.

One word, 32 forced tokens (min_new_tokens = max_new_tokens), batch 1, one ONNX Runtime thread, the
default model. The decoder's call (`Engine.run_decoder`), `Engine.run_step` and the token choice
(`service.decoding.choose_tokens`) are wrapped with timers; "rest" is the step's other bookkeeping,
the generate loop, the encoder and the batch set-up, spread over the 32 steps. The best of 200 runs.

    taskset -c 1 .venv/bin/python docs/bench/step_python.py --variant int8 [--logprobs]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import service.engine as engine_module
from service.bundle import load_bundle
from service.engine import DecodingOptions, Engine

BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variant", default="int8")
    p.add_argument("--logprobs", action="store_true", help="report each token's log-probability (what streaming does)")
    p.add_argument("--runs", type=int, default=200)
    args = p.parse_args()
    engine = Engine(load_bundle(BUNDLE), variant=args.variant, threads=1)
    n = 32
    opts = DecodingOptions(max_new_tokens=n, min_new_tokens=n, logprobs=args.logprobs)
    ids = [engine.encode_text("phonetics")]
    spent = {"ort": 0.0, "run_step": 0.0, "choose": 0.0}

    def timed(key, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t

        return wrapper

    engine.run_decoder = timed("ort", engine.run_decoder)
    engine.run_step = timed("run_step", engine.run_step)
    engine_module.choose_tokens = timed("choose", engine_module.choose_tokens)
    for _ in range(20):
        engine.generate(ids, opts)
    best = None
    for _ in range(args.runs):
        spent.update(dict.fromkeys(spent, 0.0))
        t = time.perf_counter()
        engine.generate(ids, opts)
        total = time.perf_counter() - t
        if best is None or total < best[0]:
            best = (total, dict(spent))
    total, s = best
    ms = lambda x: round(x / n * 1000, 3)  # noqa: E731
    print(
        json.dumps(
            {
                "variant": args.variant,
                "logprobs": args.logprobs,
                "ms_per_step_total": ms(total),
                "ms_per_step_onnxruntime": ms(s["ort"]),
                "ms_per_step_python_run_step": ms(s["run_step"] - s["ort"]),
                "ms_per_step_python_token_choice": ms(s["choose"]),
                "ms_per_step_python_rest": ms(total - s["run_step"] - s["choose"]),
                "ms_per_step_python_all": ms(total - s["ort"]),
            }
        )
    )


if __name__ == "__main__":
    main()
