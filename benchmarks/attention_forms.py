"""Forms of one decoder attention (T = 1) in ONNX Runtime: bitwise invariant to padding and batch? how fast?

Each form maps q [B,H,1,Dh], K and V [B,H,S,Dh] and an additive key bias [B,1,1,S] to the attention output.
Invariance: 40 random rows, each alone (no padding) against the same row in a batch of 32 with 1-8 padded keys
(left or right, bias -1e9), max |difference|. Speed: median of 400 calls, 1 thread, microseconds.

    taskset -c 1 .venv/bin/python -m benchmarks.attention_forms --out REPORT.json
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from benchmarks.measure import call_times, cpu_model

H, D = 4, 64
node = helper.make_node

SCORES = [  # what the exported graph has before ONNX Runtime fuses it: MatMul(q, K^T) * scale + bias
    node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
    node("MatMul", ["q", "kt"], ["qk"]),
    node("Mul", ["qk", "scale"], ["qks"]),
    node("Add", ["qks", "bias"], ["s"]),
]
EXP = [node("ReduceMax", ["s"], ["mx"], axes=[-1], keepdims=1), node("Sub", ["s", "mx"], ["sh"]), node("Exp", ["sh"], ["e"])]
DUP = [node("Concat", ["e", "e"], ["e2"], axis=-2)]  # the query row twice: ONNX Runtime's multi-row kernel


def ones_sum(columns: str) -> list:
    """The softmax sum as MatMul(e2, ones[S, n])[..., :1]."""
    return [
        node("Shape", ["v"], ["keys"], start=-2, end=-1),
        node("Concat", ["keys", columns], ["ones_shape"], axis=0),
        node("Expand", ["one", "ones_shape"], ["ones"]),
        node("MatMul", ["e2", "ones"], ["sums"]),
        node("Slice", ["sums", "zero", "one_i", "last"], ["sum2"]),
        node("MatMul", ["e2", "v"], ["num2"]),
        node("Div", ["num2", "sum2"], ["out2"]),
        node("Split", ["out2"], ["out", "copy"], axis=-2),
    ]


FORMS = {
    "softmax_matmul": [node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "v"], ["out"])],
    "dup_pad_v": EXP  # the form shipped before: V padded with a ones column (a copy of V every step)
    + DUP
    + [
        node("Pad", ["v", "pad_ones", "one"], ["v1"]),
        node("MatMul", ["e2", "v1"], ["o2"]),
        node("Split", ["o2"], ["o", "copy"], axis=-2),
        node("Slice", ["o", "zero", "minus_one", "last"], ["num"]),
        node("Slice", ["o", "minus_one", "end", "last"], ["sum"]),
        node("Div", ["num", "sum"], ["out"]),
    ],
    "dup_ones_1_column": EXP + DUP + ones_sum("one_i"),
    "dup_ones_8_columns": EXP + DUP + ones_sum("eight"),  # the form shipped now
    "mul_reducesum": EXP
    + [
        node("Transpose", ["e"], ["et"], perm=[0, 1, 3, 2]),
        node("Pad", ["v", "pad_ones", "one"], ["v1"]),
        node("Mul", ["et", "v1"], ["ev"]),
        node("ReduceSum", ["ev", "minus_two"], ["o"], keepdims=1),
        node("Slice", ["o", "zero", "minus_one", "last"], ["num"]),
        node("Slice", ["o", "minus_one", "end", "last"], ["sum"]),
        node("Div", ["num", "sum"], ["out"]),
    ],
}
CONSTANTS = {
    "scale": np.float32(D**-0.5),
    "one": np.float32(1.0),
    "one_i": np.array([1], np.int64),
    "eight": np.array([8], np.int64),
    "zero": np.array([0], np.int64),
    "minus_one": np.array([-1], np.int64),
    "minus_two": np.array([-2], np.int64),
    "end": np.array([2**62], np.int64),
    "last": np.array([-1], np.int64),
    "pad_ones": np.array([0, 0, 0, 0, 0, 0, 0, 1], np.int64),
}


def session(nodes: list) -> ort.InferenceSession:
    used = {i for n in SCORES + nodes for i in n.input}
    inputs = [("q", ["B", H, 1, D]), ("k", ["B", H, "S", D]), ("v", ["B", H, "S", D]), ("bias", ["B", 1, 1, "S"])]
    graph = helper.make_graph(
        SCORES + nodes,
        "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in CONSTANTS.items() if k in used],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def invariance(sess: ort.InferenceSession, rng: np.random.Generator, trials: int = 40) -> float:
    worst = 0.0
    for trial in range(trials):
        n, pad, left = int(rng.integers(1, 40)), int(rng.integers(1, 9)), trial % 2 == 0
        q, k, v = (rng.standard_normal((1, H, t, D)).astype(np.float32) for t in (1, n, n))
        alone = sess.run(None, {"q": q, "k": k, "v": v, "bias": np.zeros((1, 1, 1, n), np.float32)})[0]
        b, s = 32, n + pad
        big = {x: rng.standard_normal((b, H, t, D)).astype(np.float32) for x, t in (("q", 1), ("k", s), ("v", s))}
        big["bias"] = np.zeros((b, 1, 1, s), np.float32)
        r, keys = int(rng.integers(0, b)), slice(pad, s) if left else slice(0, n)
        big["q"][r], big["k"][r, :, keys], big["v"][r, :, keys] = q[0], k[0], v[0]
        big["bias"][r, ..., slice(0, pad) if left else slice(n, s)] = -1e9
        worst = max(worst, float(np.abs(sess.run(None, big)[0][r] - alone[0]).max()))
    return worst


def microseconds(sess: ort.InferenceSession, b: int, s: int, rng: np.random.Generator, calls: int = 400) -> float:
    feeds = {x: rng.standard_normal((b, H, t, D)).astype(np.float32) for x, t in (("q", 1), ("k", s), ("v", s))}
    feeds["bias"] = np.zeros((b, 1, 1, s), np.float32)
    return float(np.median(call_times(lambda: sess.run(None, feeds), calls, warm_up=30)) * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    sessions = {name: session(nodes) for name, nodes in FORMS.items()}
    report = {
        "invariance_max_abs_diff": {},
        "us": {},
        "cpu": cpu_model(),
        "loadavg": os.getloadavg(),
        "onnxruntime": ort.__version__,
    }
    for name, sess in sessions.items():
        report["invariance_max_abs_diff"][name] = invariance(sess, rng)
        print(f"{name:20s} max |alone - batched| {report['invariance_max_abs_diff'][name]:.2e}", flush=True)
    for b, s in [(1, 16), (32, 16), (32, 40)]:
        cell = report["us"][f"B{b}_S{s}"] = {name: microseconds(sess, b, s, rng) for name, sess in sessions.items()}
        print(f"B={b:2d} S={s}: " + "  ".join(f"{k} {v:.0f}" for k, v in cell.items()), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
