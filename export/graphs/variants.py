"""The int8 and fp16 variants: the same graphs under other names (Contract 2).

- int8: MatMul weights int8 per output channel, activations quantized with
  fixed scales calibrated on training pairs (export/pipeline/calibration.py), so a
  row's outputs never depend on the rest of its batch (`quantize_int8`).
  Whether it becomes the CPU default is decided by the gate in export/pipeline/int8_gate.py, on
  measured WER, speed and batch invariance.
- fp16: for CUDA. Weights and activations in float16, but LayerNorm and
  softmax computed in float32, and the float inputs/outputs that carry the
  attention bias and the logits stay float32 at the graph boundary (so -1e9
  never becomes -inf outside the graph and sampling sees float32 logits).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.float16 import convert_float_to_float16

from attnserve.export.graphs.format import MAX_IR_VERSION
from attnserve.service.engine.runtime import session_options

FP32_BOUNDARY = ("encoder_attention_bias", "logits")  # stay float32 in the fp16 graphs
FP16_KEEP_FP32_OPS = ["LayerNormalization", "Softmax"]


INT8_QUANTIZATION = (
    "int8 static: activations quantized with fixed scales (max |x| of each activation over training-split pairs; "
    "symmetric uint8 around 128, a ReLU's output uint8 from 0), MatMul weights int8 per output channel in [-63, 63] "
    "(no uint8 x int8 saturation without VNNI), MatMulIntegerToFloat with the bias inside; attention's softmax sum and "
    "weighted sum in an order-exact form, so a row's outputs are bitwise the same whatever else is in the batch"
)
INT8_ROW_QUANTIZATION = (  # the int8 of bundles built before fixed scales; kept for comparison
    "int8 per row: activations quantized in the graph per row (symmetric, scale max|x|/127, uint8 with zero "
    "point 128), MatMul weights int8 per output channel in [-63, 63] (no uint8 x int8 saturation without "
    "VNNI), MatMulIntegerToFloat; attention's softmax sum and "
    "weighted sum in an order-exact form, so a row's outputs are bitwise the same whatever else is in the batch"
)
DYNAMIC_QUANTIZATION = "onnxruntime dynamic, MatMul weights int8"  # the int8 of bundles built before

# Weights use 7 bits of the int8 range. On x86 without VNNI, ONNX Runtime's uint8 x int8 kernel
# adds pairs of products in int16 (vpmaddubsw) and saturates: 255 * 127 * 2 > 32767. Measured on
# this project's AVX2 machine with full-range weights, a 256-wide MatMul was off its exact integer
# result by several units; with |w| <= 63 (255 * 63 * 2 < 32767) it is exact. (int8 x int8
# activations avoid it too but ran 3-10x slower there.) ONNX Runtime's own remedy, reduce_range.
WEIGHT_LEVELS = 63
_MS_DOMAIN = "com.microsoft"  # MatMulIntegerToFloat is an ONNX Runtime contrib op


def quantize_int8(
    src: Path,
    dst: Path,
    exact_attention: bool = True,
    keep_fp32: tuple[str, ...] = (),
    activation_amax: dict[str, float] | None = None,
) -> dict:
    """The int8 variant of a graph, batch-invariant by construction; returns node counts.

    ONNX Runtime's dynamic quantization (`quantize_int8_dynamic`) takes ONE activation scale for the
    whole [B, T, K] tensor, so a row's logits depend on the other rows of its step. Here every MatMul
    with a constant 2-D weight [K, N] (and the bias Add after it) becomes, with `activation_amax`
    (max |x| per quantized activation, export/pipeline/calibration.py):

        xq = QuantizeLinear(x, s, 128)                        # s = amax / 127, fixed; a ReLU's output: amax / 255, 0
        y  = MatMulIntegerToFloat(xq, Wq, s, ws, 128, -, b)   # Wq per output channel, |Wq| <= 63

    and without it (the int8 shipped before, `INT8_ROW_QUANTIZATION`), with a scale per row computed
    in the graph, four more nodes per activation and one more per MatMul:

        amax = ReduceMax(Abs(x), last axis)                  # [B, T, 1], this row's own range
        xq   = QuantizeLinear(x / amax, 1/127, 128)
        y    = MatMulIntegerToFloat(xq, Wq, 1, ws / 127, 128) * amax + b

    MatMuls that read the same x (Q/K/V) share one quantization. Integer accumulation is exact, so
    with scales that do not depend on the batch the product is bitwise independent of it. The float
    attention around it is not, under padding: ONNX Runtime's one-row MatMul kernel and Softmax sum a
    padded length in a different order, a 1e-6 difference that an int8 rounding step can turn into
    1e-2. `exact_attention` rewrites each Softmax -> MatMul(p, V) into a form whose sums run in order
    over the padded axis (see `_exact_attention`), making the whole graph bitwise invariant to padding
    as well. MatMuls named in `keep_fp32` stay float32.
    """
    m = onnx.load(str(src))  # external data (decoder.onnx.data) is read in
    before = len(m.graph.node)
    key_lengths = _key_lengths(m) if exact_attention else {}
    if activation_amax is None:
        quantized, shared = _quantize_matmuls_per_row(m.graph, set(keep_fp32))
    else:
        quantized, shared = _quantize_matmuls_static(m.graph, set(keep_fp32), activation_amax)
    attention = _exact_attention(m.graph, key_lengths) if exact_attention else 0
    if not any(o.domain == _MS_DOMAIN for o in m.opset_import):
        m.opset_import.append(onnx.helper.make_opsetid(_MS_DOMAIN, 1))
    m.ir_version = min(m.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))
    return {
        "nodes_before": before,
        "nodes": len(m.graph.node),
        "matmuls": quantized,
        "quantizations": shared,
        "attentions": attention,
    }


def quantize_int8_dynamic(src: Path, dst: Path) -> None:
    """ONNX Runtime's dynamic quantization (one activation scale per tensor, so NOT batch-invariant):
    the baseline tests/engine/test_invariance.py tells the served int8 from, and an older bundle's int8 in
    tests/export/test_export_build.py."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer's advice to pre-process is for static quantization
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # The quantizer runs shape inference and may write IR 14; lower it afterwards.
            out = Path(tmp) / dst.name
            quantize_dynamic(src, out, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
            m = onnx.load(str(out))
    finally:
        root.setLevel(level)
    m.ir_version = min(m.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))


def _quantize_matmuls_per_row(graph: onnx.GraphProto, keep_fp32: set[str]) -> tuple[int, int]:
    """Rewrite MatMul(x, W const [K, N]) as in `quantize_int8`; returns (MatMuls, quantizations)."""
    inits = {t.name: t for t in graph.initializer}
    groups = quantized_inputs(graph, keep_fp32)
    added = [
        numpy_helper.from_array(np.array(1.0, np.float32), "int8row/one"),
        numpy_helper.from_array(np.array(1 / 127, np.float32), "int8row/inv127"),
        numpy_helper.from_array(np.array(128, np.uint8), "int8row/zero_point"),
    ]
    replace: dict[int, list[onnx.NodeProto]] = {}
    replaced_weights = set()
    for g, (x, matmuls) in enumerate(groups.items()):
        p = f"int8row/q{g}"
        nodes = [
            helper.make_node("Abs", [x], [f"{p}/abs"], name=f"{p}/Abs"),
            helper.make_node("ReduceMax", [f"{p}/abs"], [f"{p}/amax"], name=f"{p}/ReduceMax", axes=[-1], keepdims=1),
            helper.make_node("Div", [x, f"{p}/amax"], [f"{p}/x_unit"], name=f"{p}/Div"),
            helper.make_node(
                "QuantizeLinear", [f"{p}/x_unit", "int8row/inv127", "int8row/zero_point"], [f"{p}/xq"], name=f"{p}/Quantize"
            ),
        ]
        for mm in matmuls:
            wq, scale = _int8_weight(numpy_helper.to_array(inits[mm.input[1]]))
            q = f"int8row/{mm.name or mm.output[0]}"
            added += [
                numpy_helper.from_array(wq, f"{q}/weight_int8"),
                # x = amax * xq / 127: the 1/127 of the activation goes with the weight scale
                numpy_helper.from_array((scale / np.float32(127)).astype(np.float32), f"{q}/weight_scale"),
            ]
            nodes += [
                helper.make_node(
                    "MatMulIntegerToFloat",
                    [f"{p}/xq", f"{q}/weight_int8", "int8row/one", f"{q}/weight_scale", "int8row/zero_point"],
                    [f"{q}/y_unit"],
                    name=f"{q}/MatMulIntegerToFloat",
                    domain=_MS_DOMAIN,
                ),
                helper.make_node("Mul", [f"{q}/y_unit", f"{p}/amax"], [mm.output[0]], name=f"{q}/RowScale"),
            ]
            replace[id(mm)] = nodes
            nodes = []
            replaced_weights.add(mm.input[1])
    _swap_weights(graph, replace, replaced_weights, added)
    return len(replace), len(groups)


def _int8_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """W [K, N] as int8 in [-WEIGHT_LEVELS, WEIGHT_LEVELS] and its scale per output channel [N]."""
    w = w.astype(np.float32)
    scale = np.abs(w).max(axis=0) / WEIGHT_LEVELS
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.clip(np.rint(w / scale), -WEIGHT_LEVELS, WEIGHT_LEVELS).astype(np.int8), scale


def quantized_inputs(graph: onnx.GraphProto, keep_fp32: set[str] = frozenset()) -> dict[str, list[onnx.NodeProto]]:
    """The activations the int8 variant quantizes: input name -> the MatMuls with a constant 2-D float weight
    that read it (Q/K/V share one)."""
    inits = {t.name: t for t in graph.initializer}
    groups: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and node.name not in keep_fp32 else None
        if w is not None and len(w.dims) == 2 and w.data_type == onnx.TensorProto.FLOAT:
            groups.setdefault(node.input[0], []).append(node)
    return groups


def _quantize_matmuls_static(graph: onnx.GraphProto, keep_fp32: set[str], amax: dict[str, float]) -> tuple[int, int]:
    """MatMul(x, W) [+ bias] -> MatMulIntegerToFloat(QuantizeLinear(x, s), Wq, s, ws, zp, -, bias), s fixed per tensor."""
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    groups = quantized_inputs(graph, keep_fp32)
    added = []
    replace: dict[int, list[onnx.NodeProto]] = {}
    replaced = set()
    for g, (x, matmuls) in enumerate(groups.items()):
        p = f"int8static/q{g}"
        # a ReLU's output is never negative: all 256 levels above zero point 0, not 128 around it
        nonnegative = x in producer and producer[x].op_type == "Relu"
        levels, zero_point = (255, 0) if nonnegative else (127, 128)
        scale = np.float32(max(float(amax[x]), 1e-12) / levels)
        added += [
            numpy_helper.from_array(np.array(scale, np.float32), f"{p}/scale"),
            numpy_helper.from_array(np.array(zero_point, np.uint8), f"{p}/zero_point"),
        ]
        nodes = [helper.make_node("QuantizeLinear", [x, f"{p}/scale", f"{p}/zero_point"], [f"{p}/xq"], name=f"{p}/Quantize")]
        for mm in matmuls:
            wq, wscale = _int8_weight(numpy_helper.to_array(inits[mm.input[1]]))
            q = f"int8static/{mm.name or mm.output[0]}"
            added += [numpy_helper.from_array(wq, f"{q}/weight_int8"), numpy_helper.from_array(wscale, f"{q}/weight_scale")]
            inputs = [f"{p}/xq", f"{q}/weight_int8", f"{p}/scale", f"{q}/weight_scale", f"{p}/zero_point"]
            out = mm.output[0]
            # the bias Add after the MatMul goes into the kernel: one node, not two
            users = consumers.get(out, [])
            add = users[0] if len(users) == 1 and users[0].op_type == "Add" and out not in outputs else None
            bias = next((i for i in add.input if i != out), None) if add is not None else None
            if bias in inits and tuple(inits[bias].dims) == wq.shape[1:] and inits[bias].data_type == onnx.TensorProto.FLOAT:
                inputs += ["", bias]
                out = add.output[0]
                replace[id(add)] = []
            name = f"{q}/MatMulIntegerToFloat"
            nodes.append(helper.make_node("MatMulIntegerToFloat", inputs, [out], name=name, domain=_MS_DOMAIN))
            replace[id(mm)] = nodes
            nodes = []
            replaced.add(mm.input[1])
    _swap_weights(graph, replace, replaced, added)
    return sum(len(matmuls) for matmuls in groups.values()), len(groups)


def _swap_weights(graph: onnx.GraphProto, replace: dict, replaced: set[str], added: list[onnx.TensorProto]) -> None:
    """Put the new nodes in, drop the float weights no node reads any more, add the int8 ones."""
    _replace_nodes(graph, replace)
    still_used = {i for node in graph.node for i in node.input}
    kept = [t for t in graph.initializer if t.name not in replaced or t.name in still_used]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)


def calibrate_amax(path: Path, feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """max |x| over `feeds` of every activation the int8 variant quantizes, from the float32 graph at `path`."""
    m = onnx.load(str(path))
    names = list(quantized_inputs(m.graph))
    known = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names if n not in known)
    sess = ort.InferenceSession(m.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
    amax = dict.fromkeys(names, 0.0)
    for f in feeds:
        for n, v in zip(names, sess.run(names, f)):
            amax[n] = max(amax[n], float(np.abs(v).max(initial=0.0)))
    return amax


def _key_lengths(model: onnx.ModelProto) -> dict[str, str]:
    """Tensor name -> the name of its key-length axis (the second to last) where shape inference knows it by
    a name from the graph's inputs (P_plus_T, S): attentions over the same keys can share one tensor of ones.
    Only a saving: a graph shape inference cannot read gets no sharing (each attention makes its own ones)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except onnx.shape_inference.InferenceError:
        return {}
    names = {}
    for v in [*inferred.value_info, *inferred.input, *inferred.output]:
        dims = v.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[-2].dim_param and not dims[-2].dim_param.startswith("unk__"):
            names[v.name] = dims[-2].dim_param
    return names


def _exact_attention(graph: onnx.GraphProto, key_lengths: dict[str, str]) -> int:
    """Rewrite Softmax(s) -> MatMul(p, V) [B,H,T,S] x [B,H,S,Dh] as

        e2  = Concat(e, e), e = Exp(s - ReduceMax(s))    # exact per element; each query row twice
        num = MatMul(e2, V)                               # [B,H,2T,Dh]
        sum = MatMul(e2, ones[S, 8])[..., :1]             # [B,H,2T,1]: the softmax sum
        out = first T rows of num / sum

    ONNX Runtime's MatMul kernel for several rows sums K in order, so zero weights of padded keys
    (left or right) leave the sums bitwise unchanged; its one-row kernel (T = 1, every decoder step),
    its one-column kernel and Softmax's vectorised sum do not: hence the duplicated row, and 8 columns
    of ones (one broadcast GEMM over every batch row and head) for the sum. An earlier form padded V
    with a ones column, copying the whole cache every step (benchmarks/HISTORY.md, "Batch-invariant
    int8"). Attentions whose V have a key axis of one name (`key_lengths`) share their ones. Returns the
    attentions rewritten."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    replace: dict[int, list[onnx.NodeProto]] = {}
    ones_of: dict[str, str] = {}  # key-length name (or V's own name) -> its tensor of ones, made at its first use
    for sm in graph.node:
        users = consumers.get(sm.output[0], []) if sm.op_type == "Softmax" else []
        axis = next((a.i for a in sm.attribute if a.name == "axis"), -1)
        if axis != -1 or len(users) != 1 or users[0].op_type != "MatMul" or users[0].input[0] != sm.output[0]:
            continue
        if sm.output[0] in outputs:  # the explain graph returns the probabilities themselves
            continue
        mm, p = users[0], f"int8row/attention{len(replace) // 2}"
        replace[id(sm)] = [
            helper.make_node("ReduceMax", [sm.input[0]], [f"{p}/max"], name=f"{p}/ReduceMax", axes=[-1], keepdims=1),
            helper.make_node("Sub", [sm.input[0], f"{p}/max"], [f"{p}/shifted"], name=f"{p}/Sub"),
            helper.make_node("Exp", [f"{p}/shifted"], [f"{p}/e"], name=f"{p}/Exp"),
            helper.make_node("Concat", [f"{p}/e", f"{p}/e"], [f"{p}/e2"], name=f"{p}/Concat", axis=-2),
        ]
        v = mm.input[1]
        keys = key_lengths.get(v, v)
        ones_nodes = []
        if keys not in ones_of:
            ones_of[keys] = f"{p}/ones"
            ones_nodes = [
                helper.make_node("Shape", [v], [f"{p}/keys"], name=f"{p}/Keys", start=-2, end=-1),
                helper.make_node(
                    "Concat", [f"{p}/keys", "int8row/sum_columns"], [f"{p}/ones_shape"], name=f"{p}/OnesShape", axis=0
                ),
                helper.make_node("Expand", ["int8row/one", f"{p}/ones_shape"], [f"{p}/ones"], name=f"{p}/Ones"),
            ]
        replace[id(mm)] = [
            helper.make_node("MatMul", [f"{p}/e2", v], [f"{p}/num2"], name=f"{p}/MatMul"),
            *ones_nodes,
            helper.make_node("MatMul", [f"{p}/e2", ones_of[keys]], [f"{p}/sums"], name=f"{p}/SumMatMul"),
            helper.make_node(
                "Slice", [f"{p}/sums", "int8row/zero", "int8row/one_index", "int8row/last_axis"], [f"{p}/sum2"], name=f"{p}/Sum"
            ),
            helper.make_node("Div", [f"{p}/num2", f"{p}/sum2"], [f"{p}/out2"], name=f"{p}/Div"),
            helper.make_node("Split", [f"{p}/out2"], [mm.output[0], f"{p}/out_copy"], name=f"{p}/Split", axis=-2),
        ]
    if replace:
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.array([8], np.int64), "int8row/sum_columns"),
                numpy_helper.from_array(np.array([0], np.int64), "int8row/zero"),
                numpy_helper.from_array(np.array([1], np.int64), "int8row/one_index"),
                numpy_helper.from_array(np.array([-1], np.int64), "int8row/last_axis"),
            ]
        )
        if not any(t.name == "int8row/one" for t in graph.initializer):
            graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "int8row/one"))
    _replace_nodes(graph, replace)
    return len(replace) // 2


def _replace_nodes(graph: onnx.GraphProto, replace: dict[int, list[onnx.NodeProto]]) -> None:
    nodes = [new for node in graph.node for new in replace.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(nodes)


def convert_fp16(src: Path, dst: Path) -> None:
    # ONNX Runtime ships the converter (a copy of onnxconverter-common's): no extra dependency.
    m = onnx.load(str(src))
    io_names = {v.name for v in m.graph.input} | {v.name for v in m.graph.output}
    m16 = convert_float_to_float16(
        m,
        keep_io_types=[n for n in FP32_BOUNDARY if n in io_names],
        op_block_list=FP16_KEEP_FP32_OPS,
        # The output projection stays float32 too: logits are what sampling and argmax read, and
        # float16 rounding of large logits is the biggest error of the variant for little speed.
        node_block_list=_logits_projection(m.graph),
        # Constants outside the float16 range are clipped (the -1e9 mask constants become -1e4,
        # still far below any real score), never turned into inf.
        max_finite_val=1e4,
    )
    _topological_sort(m16.graph)  # the converter appends its Cast nodes at the end
    m16.ir_version = min(m16.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(m16)
    onnx.save(m16, str(dst))


def _topological_sort(graph: onnx.GraphProto) -> None:
    """Reorder nodes so every input is produced before it is used (ONNX requires it)."""
    available = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for node in pending:
            if all(name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise ValueError(f"graph has a cycle or a dangling input near node {rest[0].name!r}")
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)


def _logits_projection(graph: onnx.GraphProto) -> list[str]:
    """Name of the MatMul that produces `logits` (walking back through slicing/reshaping), if any."""
    producer = {out: node for node in graph.node for out in node.output}
    name, seen = "logits", 0
    while name in producer and seen < 8:
        node = producer[name]
        if node.op_type in ("MatMul", "Gemm"):
            return [node.name]
        name, seen = node.input[0], seen + 1
    return []
