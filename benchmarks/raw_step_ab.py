"""Two decoder step graphs side by side: the same outputs? which step is faster?

The decoder's `session.run` alone (no engine), 1 thread by default, on synthetic inputs of the bundle's
shapes (B rows, P past slots, S source positions). Rounds interleave A and B; each round's figure is the
minimum of its calls, each cell the median over rounds. Outputs are compared bitwise on one mixed input.

    git show REV:models/g2p-en/decoder.int8.onnx > /tmp/A.onnx
    taskset -c 1 .venv/bin/python -m benchmarks.raw_step_ab /tmp/A.onnx models/g2p-en/decoder.int8.onnx --out REPORT.json
"""

from __future__ import annotations

import argparse
import json
import os
from functools import partial

import numpy as np
import onnxruntime as ort

from benchmarks.measure import call_times, cpu_model

SHAPES = [(1, 8, 10), (1, 40, 20), (32, 8, 10), (32, 32, 10), (32, 48, 20)]  # (B, P, S): the default model's range


def session(path: str, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def feeds(sess: ort.InferenceSession, b: int, p: int, s: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = {"B": b, "T": 1, "P": p, "S": s, "P_plus_T": p + 1}
    out = {}
    for i in sess.get_inputs():
        shape = [sizes.get(d, d) for d in i.shape]
        if "mask" in i.name:
            out[i.name] = np.ones(shape, np.int64)
        elif i.type == "tensor(int64)":
            out[i.name] = rng.integers(3, 40, shape).astype(np.int64)  # token ids and positions within the model's range
        elif "bias" in i.name:
            out[i.name] = np.zeros(shape, np.float32)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out")
    args = ap.parse_args()
    a, b = session(args.a, args.threads), session(args.b, args.threads)

    # one input with padding on both axes, rows at different past lengths
    mixed = feeds(a, 8, 12, 9)
    mixed["decoder_attention_mask"][:4, :5] = 0
    mixed["encoder_attention_bias"][::2, ..., -3:] = -1e9
    out_a, out_b = a.run(None, mixed), b.run(None, mixed)
    same = {o.name: bool(np.array_equal(x, y)) for o, x, y in zip(a.get_outputs(), out_a, out_b)}

    cells = []
    for bsz, past, src in SHAPES:
        f = feeds(a, bsz, past, src)
        calls = 40 if bsz == 1 else 10
        per_round = {"a": [], "b": []}
        for _ in range(args.rounds):
            for key, sess in (("a", a), ("b", b)):
                per_round[key].append(min(call_times(partial(sess.run, None, f), calls, warm_up=3)))
        ms_a, ms_b = (float(np.median(per_round[k]) * 1e3) for k in ("a", "b"))
        cells.append({"batch": bsz, "past": past, "source": src, "ms_a": ms_a, "ms_b": ms_b, "b_over_a": ms_b / ms_a})
        print(f"B={bsz:2d} P={past:2d} S={src:2d}: A {ms_a:.3f} ms  B {ms_b:.3f} ms  B/A {ms_b / ms_a:.3f}", flush=True)
    print("outputs bitwise equal:", all(same.values()), same if not all(same.values()) else "")
    report = {
        "a": os.path.basename(args.a),
        "b": os.path.basename(args.b),
        "threads": args.threads,
        "rounds": args.rounds,
        "outputs_bitwise_equal": same,
        "cells": cells,
        "cpu": cpu_model(),
        "loadavg": os.getloadavg(),
        "onnxruntime": ort.__version__,
    }
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
