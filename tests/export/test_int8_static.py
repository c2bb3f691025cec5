"""The int8 variant's fixed-scale quantization (export/graphs/variants.py), on a hand-made graph whose every
number can be recomputed with numpy: calibration reads each quantized activation's max |x|, and the
rewritten graph computes exactly the documented integer arithmetic, alone or batched."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.graphs.variants import _int8_weight, calibrate_amax, quantize_int8

RNG = np.random.default_rng(0)
W1, B1 = RNG.standard_normal((8, 16)).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
W2, B2 = RNG.standard_normal((16, 4)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
W3 = RNG.standard_normal((8, 4)).astype(np.float32)


def _float_graph(path):
    """y = Relu(x W1 + b1) W2 + b2, and z = x W3 (a second MatMul reading x, without bias)."""
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "B1"], ["h1"], name="add1"),
        helper.make_node("Relu", ["h1"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "W2"], ["y0"], name="mm2"),
        helper.make_node("Add", ["B2", "y0"], ["y"], name="add2"),  # bias first: either order is fused
        helper.make_node("MatMul", ["x", "W3"], ["z"], name="mm3"),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in {"W1": W1, "B1": B1, "W2": W2, "B2": B2, "W3": W3}.items()]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", k]) for n, k in (("y", 4), ("z", 4))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _quantize(x, amax, levels, zero_point):
    return np.clip(np.rint(x / np.float32(amax / levels)) + zero_point, 0, 255)


def _reference(x, amax_x, amax_r):
    """The documented arithmetic: uint8 activations at fixed scales, int8 weights per output channel."""
    wq1, ws1 = _int8_weight(W1)
    wq2, ws2 = _int8_weight(W2)
    wq3, ws3 = _int8_weight(W3)
    qx = _quantize(x, amax_x, 127, 128) - 128
    h = (qx @ wq1.astype(np.float64)) * (amax_x / 127 * ws1) + B1
    r = np.maximum(h, 0)
    qr = _quantize(r, amax_r, 255, 0)
    y = (qr @ wq2.astype(np.float64)) * (amax_r / 255 * ws2) + B2
    z = (qx @ wq3.astype(np.float64)) * (amax_x / 127 * ws3)
    return y, z


def test_calibration_reads_each_quantized_activations_max_abs(tmp_path):
    _float_graph(tmp_path / "f.onnx")
    feeds = [{"x": RNG.standard_normal((n, 8)).astype(np.float32) * (k + 1)} for k, n in enumerate((1, 5, 3))]
    amax = calibrate_amax(tmp_path / "f.onnx", feeds)
    assert set(amax) == {"x", "r"}  # x is read by two MatMuls: one quantization
    xs = np.concatenate([f["x"] for f in feeds])
    assert amax["x"] == float(np.abs(xs).max())
    np.testing.assert_allclose(amax["r"], np.maximum(xs @ W1 + B1, 0).max(), rtol=1e-5)


def test_fixed_scale_graph_computes_the_integer_arithmetic_alone_and_batched(tmp_path):
    _float_graph(tmp_path / "f.onnx")
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    amax = calibrate_amax(tmp_path / "f.onnx", [{"x": x[1:]}])
    x[0] *= 10  # beyond the calibrated range: saturates at the ends of uint8
    counts = quantize_int8(tmp_path / "f.onnx", tmp_path / "q.onnx", exact_attention=False, activation_amax=amax)
    g = onnx.load(str(tmp_path / "q.onnx")).graph
    ops = [n.op_type for n in g.node]
    assert counts["matmuls"] == 3 and counts["quantizations"] == 2
    assert sorted(ops) == ["MatMulIntegerToFloat"] * 3 + ["QuantizeLinear"] * 2 + ["Relu"]  # both biases inside

    sess = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    y, z = sess.run(["y", "z"], {"x": x})
    ref_y, ref_z = _reference(x.astype(np.float64), amax["x"], amax["r"])
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, ref_z, rtol=1e-5, atol=1e-5)
    float_y = np.maximum(x @ W1 + B1, 0) @ W2 + B2
    assert np.abs(y[1:] - float_y[1:]).max() < 0.02 * np.abs(float_y[1:]).max()  # in range: close to float
    assert np.abs(y[0] - float_y[0]).max() > 0.1 * np.abs(float_y[0]).max()  # out of range: clipped

    for i in range(len(x)):  # each row alone: bitwise what it was in the batch
        alone = sess.run(["y", "z"], {"x": x[i : i + 1]})
        assert np.array_equal(alone[0][0], y[i]) and np.array_equal(alone[1][0], z[i])
