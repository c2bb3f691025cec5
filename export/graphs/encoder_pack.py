"""An encoder whose per-token work runs on the real tokens only, as CTranslate2's Padder does.

The encoder is called on [B, S] rows padded to the longest. Its LayerNorms, quantizations, projections, ReLUs and
residual Adds each treat one token alone, so they can run on the T real tokens of the batch, packed [T, N], and
only the attention (which mixes a row's tokens) and the graph outputs need the padded [B, S, N] layout:

- `index` = NonZero(the mask as [B*S]) [T], each real token's flat position; `unpack` [B, S], each position's
  packed row: its row's first packed row plus the row's real tokens up to it, minus one (a padding position gets
  the real token before it, or the batch's last one when none comes before it: a copy of a real token, finite,
  and masked or discarded wherever it is read);
- the tensor the first LayerNorm reads (the embedded tokens) and each attention's output are packed:
  Gather(Reshape(x, [-1, D]), index);
- a packed tensor read by anything else (the attention's quantized input, a graph output) is unpacked:
  Gather(x, unpack) [B, S, N];
- a projection whose output goes only to something that is not per-token (each cross K/V projection, reshaped into
  heads for an output) runs on the padded rows, from its quantized input unpacked once (uint8, a quarter of the
  bytes): on the default model's shape that was faster at batch 1 than six float outputs unpacked after.

A real token's row goes through the same arithmetic on the same values whatever the other rows are, so every real
position of every output is bitwise the same as the padded graph's; padding positions hold other values (copies of
real tokens' rows). A batch whose mask has no real token at all cannot be run (the engine refuses empty sources).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from attnserve.export.graphs.encoder_simplify import node_attribute

ATTENTION_MASK = "attention_mask"
PREFIX = "encoder/pack/"
INDEX = PREFIX + "index"
UNPACK = PREFIX + "unpack"
ATTENTION_OPS = ("QAttention", "MultiHeadAttention")


def pack_tokens(model: onnx.ModelProto, d_model: int) -> tuple[onnx.ModelProto, dict]:
    """A copy of `model` (an encoder with LayerNormalization and QAttention or MultiHeadAttention nodes) running
    its per-token nodes on the real tokens; and {"packed_nodes": n, "packs": n, "unpacks": n}. Unchanged (and
    packed_nodes 0) when it has no LayerNormalization."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    constants = _constant_ranks(graph)
    norms = [n for n in graph.node if n.op_type == "LayerNormalization"]
    if not norms:
        return out, {"packed_nodes": 0, "packs": 0, "unpacks": 0}
    entries = [norms[0].input[0]] + [n.output[0] for n in graph.node if n.op_type in ATTENTION_OPS]
    graph_outputs = {o.name for o in graph.output}
    packed: set[str] = set()
    unpacked: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []
    counts = {"packed_nodes": 0, "packs": 0, "unpacks": 0}
    pending = set(entries)
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for node in graph.node:
        if _row_local(node, packed, constants) and _feeds_row_local(node, readers, constants):
            nodes.append(node)
            packed.update(node.output)
            counts["packed_nodes"] += 1
        else:
            for i, name in enumerate(node.input):
                if name in packed:
                    if name not in unpacked:
                        unpacked[name] = name + "/unpacked"
                        nodes.append(helper.make_node("Gather", [name, UNPACK], [unpacked[name]], axis=0))
                        counts["unpacks"] += 1
                    node.input[i] = unpacked[name]
            nodes.append(node)
        for name in [o for o in node.output if o in pending]:
            nodes.extend(_pack(graph, node, name, d_model))
            packed.add(name)
            counts["packs"] += 1
    for name in graph_outputs & packed:  # a per-token graph output: unpacked under its own name
        for node in nodes:
            node.output[:] = [o + "/packed" if o == name else o for o in node.output]
            node.input[:] = [i + "/packed" if i == name else i for i in node.input]
        nodes.append(helper.make_node("Gather", [name + "/packed", UNPACK], [name], axis=0))
        counts["unpacks"] += 1
    del graph.node[:]
    graph.node.extend(_index_nodes(graph) + nodes)
    return out, counts


def _row_local(node: onnx.NodeProto, packed: set[str], constants: dict[str, int]) -> bool:
    """Whether `node` treats each token alone and reads only packed tensors and constants it broadcasts per token."""
    data = [name for name in node.input if name and name not in constants]
    if not data or any(name not in packed for name in data):
        return False
    op = node.op_type
    if op == "LayerNormalization":
        return node_attribute(node, "axis", -1) == -1
    if op == "QuantizeLinear":
        return all(constants.get(name) == 0 for name in node.input[1:] if name)
    if op == "MatMulIntegerToFloat":
        return node.input[0] in packed and len(data) == 1
    if op in ("Add", "Mul", "Sub"):
        return all(constants[name] <= 1 for name in node.input if name in constants)
    return op == "Relu"


def _feeds_row_local(node: onnx.NodeProto, readers: dict, constants: dict[str, int]) -> bool:
    """Whether a GEMM's output goes on to per-token work: one read only by what unpacks it (the cross K/V heads
    split) is cheaper run on the padded rows from one unpacked uint8 input than unpacked from floats after."""
    if node.op_type != "MatMulIntegerToFloat":
        return True
    return any(_row_local(r, set(r.input), constants) for r in readers.get(node.output[0], []))  # as if r's inputs were packed


def _constant_ranks(graph: onnx.GraphProto) -> dict[str, int]:
    """The rank of every constant: initializers, Constant nodes and Identity of a constant."""
    ranks = {init.name: len(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            ranks[node.output[0]] = len(node.attribute[0].t.dims)
        elif node.op_type == "Identity" and node.input[0] in ranks:
            ranks[node.output[0]] = ranks[node.input[0]]
    return ranks


def _pack(graph: onnx.GraphProto, producer: onnx.NodeProto, name: str, d_model: int) -> list[onnx.NodeProto]:
    """`producer` writes `name` + "/padded" [B, S, D] instead; Reshape and Gather it into `name` [T, D]."""
    padded = name + "/padded"
    producer.output[:] = [padded if o == name else o for o in producer.output]
    shape = PREFIX + "rows_shape"
    if not any(init.name == shape for init in graph.initializer):
        graph.initializer.append(numpy_helper.from_array(np.array([-1, d_model], np.int64), shape))
    return [
        helper.make_node("Reshape", [padded, shape], [name + "/rows"]),
        helper.make_node("Gather", [name + "/rows", INDEX], [name], axis=0),
    ]


def _index_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """index [T] (each real token's flat position) and unpack [B, S] (each position's packed row: the row's start
    among the packed tokens plus the real tokens up to it, minus one), from the mask alone."""
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1], np.int64), PREFIX + "flat_shape"),
            numpy_helper.from_array(np.array(0, np.int64), PREFIX + "rows_axis"),
            numpy_helper.from_array(np.array(1, np.int64), PREFIX + "one"),
            numpy_helper.from_array(np.array([1], np.int64), PREFIX + "tokens_axes"),
        ]
    )
    return [
        helper.make_node("Reshape", [ATTENTION_MASK, PREFIX + "flat_shape"], [PREFIX + "flat"]),
        helper.make_node("NonZero", [PREFIX + "flat"], [PREFIX + "nonzero"]),
        helper.make_node("Reshape", [PREFIX + "nonzero", PREFIX + "flat_shape"], [INDEX]),
        helper.make_node("CumSum", [ATTENTION_MASK, PREFIX + "one"], [PREFIX + "in_row"]),  # [B, S]
        helper.make_node("ReduceSum", [ATTENTION_MASK, PREFIX + "tokens_axes"], [PREFIX + "row_len"], keepdims=1),
        helper.make_node("CumSum", [PREFIX + "row_len", PREFIX + "rows_axis"], [PREFIX + "row_start"], exclusive=1),
        helper.make_node("Sub", [PREFIX + "row_start", PREFIX + "one"], [PREFIX + "row_start_1"]),  # [B, 1]
        helper.make_node("Add", [PREFIX + "in_row", PREFIX + "row_start_1"], [UNPACK]),
    ]
