"""Where a batch-1 decode step's time goes: inside ONNX Runtime, and the engine's Python around it.

One word, forced lengths (min_new_tokens = max_new_tokens), batch 1, one ONNX Runtime thread, the default
model. The decoder's call (`Engine.run_decoder`), the encoder's, `Engine.run_step` and the token choice
(`attnserve.service.engine.step.choose_tokens`) are wrapped with timers; the best of `--runs` generations per length.

- `ms_per_step_*` (32 tokens): the decoder call, the Python of run_step around it, token choice, and "rest"
  (the step's other bookkeeping, the generate loop and the request's set-up, spread over the 32 steps);
  `ms_per_step_python_all` is the whole generation's time outside ONNX Runtime (encoder included in ONNX
  Runtime) over 32.
- `ms_python_marginal_per_step`: what one more step adds outside ONNX Runtime, (Python at 32 tokens - Python
  at 8 tokens) / 24, without the per-request set-up, timed with only ONNX Runtime's calls wrapped;
  `ms_python_per_request`: that set-up (Python at 8 tokens less 8 marginal steps).

    taskset -c 1 .venv/bin/python -m benchmarks.step_python --variant int8 [--logprobs]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import attnserve.service.engine.engine as engine_module
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from benchmarks.measure import cpu_model

BUNDLE = Path(__file__).resolve().parents[1] / "models" / "g2p-en"


def timing(fn, spent: dict, key: str):
    """`fn`, adding the time of each call to `spent[key]`."""

    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t

    return wrapper


class TimedSession:
    """An ONNX Runtime session whose `run` adds its time to `spent[key]`."""

    def __init__(self, session, spent: dict, key: str):
        self.session, self.spent, self.key = session, spent, key

    def run(self, *a, **k):
        t = time.perf_counter()
        try:
            return self.session.run(*a, **k)
        finally:
            self.spent[self.key] += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self.session, name)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variant", default="int8")
    p.add_argument("--logprobs", action="store_true", help="report each token's log-probability (what streaming does)")
    p.add_argument("--runs", type=int, default=200)
    args = p.parse_args()
    engine = Engine(load_bundle(BUNDLE), variant=args.variant, threads=1)
    ids = [engine.encode_text("phonetics")]
    spent = {"ort": 0.0, "encoder": 0.0, "run_step": 0.0, "choose": 0.0}

    def timed(key, fn):
        return timing(fn, spent, key)

    engine.run_decoder = timed("ort", engine.run_decoder)
    engine.encoder = TimedSession(engine.encoder, spent, "encoder")
    choose_tokens = engine_module.choose_tokens

    def step_timers(on: bool) -> None:
        """The timers inside the step (run_step, token choice): for the breakdown; off, only ONNX Runtime's calls are
        timed, so the marginal step carries no timer of its own (each costs ~1 us in a step's cold caches)."""
        if on:
            engine.run_step = timed("run_step", Engine.run_step.__get__(engine))
            engine_module.choose_tokens = timed("choose", choose_tokens)
        else:
            engine.__dict__.pop("run_step", None)
            engine_module.choose_tokens = choose_tokens

    def best(n: int) -> tuple[float, dict]:
        """The generation with the least time outside ONNX Runtime, of args.runs."""
        opts = DecodingOptions(max_new_tokens=n, min_new_tokens=n, logprobs=args.logprobs)
        for _ in range(20):
            engine.generate(ids, opts)
        out = None
        for _ in range(args.runs):
            spent.update(dict.fromkeys(spent, 0.0))
            t = time.perf_counter()
            engine.generate(ids, opts)
            total = time.perf_counter() - t
            python = total - spent["ort"] - spent["encoder"]
            if out is None or python < out[1]:
                out = (total, python, dict(spent))
        return out

    n = 32
    step_timers(True)
    total, python, s = best(n)
    step_timers(False)
    _, python_32, _ = best(n)
    _, python_8, _ = best(8)
    marginal = (python_32 - python_8) / (n - 8)
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
                "ms_per_step_python_rest": ms(total - s["run_step"] - s["choose"] - s["encoder"]),
                "ms_per_step_python_all": ms(python),
                "ms_encoder_per_request": round(s["encoder"] * 1000, 3),
                "ms_python_marginal_per_step": round(marginal * 1000, 4),
                "ms_python_per_request": round((python_8 - 8 * marginal) * 1000, 3),
                "cpu": cpu_model(),
            }
        )
    )


if __name__ == "__main__":
    main()
