"""An int8 encoder's Q, K and V projections and their MultiHeadAttention as one com.microsoft QAttention, every output
bitwise the same.

In the int8 encoder with fused attention (export/graphs/encoder_attention.py) each layer quantizes its LayerNorm's
output once, multiplies it by Q, K and V in three MatMulIntegerToFloat, and MultiHeadAttention reads the three
[B, S, D] results. QAttention does the same in one node: one int8 GEMM over the concatenated [D, 3D] weights
(weight scales and biases concatenated the same way), written straight into the heads layout its attention reads,
with the same attention kernel. int32 accumulation is exact and each column is then scaled and biased by the same
numbers, and the attention core, mask and scale are the same, so every output is bitwise the same, which
`attnserve-export simplify-encoder` checks on the parity corpus.

Measured and left out (AMD EPYC, AVX2, one thread, the default model's shape):
- one MatMulIntegerToFloat for Q, K and V then a Split to MultiHeadAttention: 3-4% slower at batch 32, the Split
  copying what the GEMM wrote (ONNX Runtime 1.32's CPU MultiHeadAttention refuses the packed-QKV query that would
  avoid it: "Packed QKV of shape (B, L, N, 3, H) not implemented for CPU");
- one MatMulIntegerToFloat for the six cross-attention K/V, then one Reshape, Transpose and Split to the outputs:
  1-9% slower at batch 32, the one large Transpose slower than six small ones; the GEMM itself gained about 1%.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from attnserve.export.graphs.encoder_simplify import remove_dead

GEMM = "MatMulIntegerToFloat"
# MultiHeadAttention's attributes QAttention reads the same way (mask_filter_value: the bias a masked key gets).
SHARED_ATTRIBUTES = ("num_heads", "scale", "mask_filter_value")


def fuse_qkv_attention(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of `model` with each MultiHeadAttention(q, k, v, key_padding_mask) whose q, k and v are
    MatMulIntegerToFloat of one quantized input (same scale and zero point), read by nothing else, with weights
    [D, D] int8, weight scales and biases as initializers and no weight zero point, as one QAttention; and how many
    were fused. Any other attention is left as it was."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {init.name: init for init in graph.initializer}
    producers = {name: node for node in graph.node for name in node.output}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    fused = 0
    for mha in [n for n in graph.node if n.op_type == "MultiHeadAttention" and n.domain == "com.microsoft"]:
        projections = _projections(mha, producers, readers, inits)
        if projections is None:
            continue
        qattention, new_inits = _qattention(mha, projections, inits)
        graph.initializer.extend(new_inits)
        graph.node.insert(list(graph.node).index(mha), qattention)
        for node in (mha, *projections):
            graph.node.remove(node)
        fused += 1
    remove_dead(graph)
    return out, fused


def _projections(mha: onnx.NodeProto, producers: dict, readers: dict, inits: dict) -> list[onnx.NodeProto] | None:
    """The Q, K and V MatMulIntegerToFloat `mha` reads, when they can become one QAttention; None otherwise."""
    inputs = list(mha.input)
    if len(inputs) != 5 or not all(inputs[:3]) or inputs[3] or not inputs[4]:
        return None  # a bias, a past, an attention bias or no padding mask: not the encoder's self-attention
    if any(a.name not in SHARED_ATTRIBUTES for a in mha.attribute):
        return None
    nodes = [producers.get(name) for name in inputs[:3]]
    if any(n is None or n.op_type != GEMM or n.domain != "com.microsoft" or readers.get(n.output[0]) != 1 for n in nodes):
        return None
    if len({(n.input[0], n.input[2], n.input[4]) for n in nodes}) != 1 or not all(_fusable(n, inits) for n in nodes):
        return None
    return nodes


def _fusable(node: onnx.NodeProto, inits: dict) -> bool:
    """Weight [K, N] int8, weight scale [N] or one value, bias [N]: all initializers; no weight zero point."""
    inputs = list(node.input) + [""] * (7 - len(node.input))
    weight, scale, bias = inputs[1], inputs[3], inputs[6]
    if inputs[5] or weight not in inits or scale not in inits or bias not in inits:
        return False
    w = inits[weight]
    if len(w.dims) != 2 or w.data_type != onnx.TensorProto.INT8:
        return False
    return list(inits[bias].dims) == [w.dims[1]] and list(inits[scale].dims) in ([], [1], [w.dims[1]])


def _qattention(mha: onnx.NodeProto, projections: list[onnx.NodeProto], inits: dict) -> tuple[onnx.NodeProto, list]:
    """QAttention(input, weight [D, 3D], bias [3D], input scale, weight scale [3D], mask, input zero point) in
    place of `mha` and `projections`, and its new initializers."""
    weights, scales, biases = [], [], []
    for node in projections:
        weight = numpy_helper.to_array(inits[node.input[1]])
        weights.append(weight)
        scales.append(np.broadcast_to(numpy_helper.to_array(inits[node.input[3]]).reshape(-1), weight.shape[1:]))
        biases.append(numpy_helper.to_array(inits[node.input[6]]))
    prefix = mha.name or mha.output[0]
    new_inits = [
        numpy_helper.from_array(np.ascontiguousarray(np.concatenate(parts, axis=-1)), f"{prefix}/qkv_{kind}")
        for kind, parts in (("weight", weights), ("bias", biases), ("weight_scale", scales))
    ]
    first = projections[0]
    node = helper.make_node(
        "QAttention",
        [first.input[0], new_inits[0].name, new_inits[1].name, first.input[2], new_inits[2].name, mha.input[4], first.input[4]],
        list(mha.output),
        name=prefix.replace("MultiHeadAttention", "QAttention"),
        domain="com.microsoft",
    )
    node.attribute.extend(mha.attribute)
    return node, new_inits
