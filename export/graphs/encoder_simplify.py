"""An exported encoder graph without its shape plumbing, every output bitwise the same.

The TorchScript exporter writes each attention head split and merge as
`Reshape(x, Concat(Unsqueeze(Gather(Shape(x), i)), ..., H, Dh))`, and the positions as
`Gather(table, Expand(Unsqueeze(Range(0, Shape(ids)[1], 1)), Shape(ids)))`. ONNX Runtime cannot fold
either (B and S are dynamic), so each encoder call dispatches a few hundred tiny nodes. The rewrites:

- a Reshape whose shape is a Concat of constants and dims read back from the tensor being reshaped
  gets a constant shape, with 0 ("keep this dim", `allowzero=0`) wherever the Concat read the same dim
  of its own input (followed through Transposes, so the merge of heads qualifies too);
- the positions become `Slice(table, 0, S)` [S, D], which the Add that consumes them broadcasts over
  the batch: each element is the same table row added to the same embedding;
- nodes and initializers that no output depends on any more are removed.

A rewrite applies only where its pattern is matched exactly; anything else is left as it was. No
arithmetic changes (Reshape and Slice move no values; an Add adds the same two floats), so every
output is bitwise the same, which `attnserve-export simplify-encoder` checks again on the parity corpus.

The int8 encoder's Q, K and V projections are fused later, with its attention (export/graphs/encoder_fuse.py).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper


def simplify_encoder(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with constant Reshape shapes, sliced positions and no dead nodes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    constants = _constants(graph)
    producers = {name: node for node in graph.node for name in node.output}
    new_inits = []
    for node in graph.node:
        if node.op_type == "Reshape":
            shape = _constant_reshape_shape(node, producers, constants)
            if shape is not None:
                name = node.output[0] + "/constant_shape"
                new_inits.append(numpy_helper.from_array(np.array(shape, dtype=np.int64), name))
                node.input[1] = name
    graph.initializer.extend(new_inits)
    _slice_positions(graph, producers, constants)
    remove_dead(graph)
    return out


def op_counts(model: onnx.ModelProto) -> dict:
    """{"total": n, op_type: n, ...}, most frequent first (Constant nodes included, as the graph holds them)."""
    counts = Counter(node.op_type for node in model.graph.node)
    return {"total": len(model.graph.node), **dict(counts.most_common())}


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def node_attribute(node: onnx.NodeProto, name: str, default=None):
    """The value of `node`'s attribute `name`, or `default` when it has none."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _dim_ref(name: str, producers: dict, constants: dict) -> tuple[str, int] | None:
    """(X, i) when `name` is Unsqueeze(Gather(Shape(X), i), axes=[0]): X's dim i as a 1-element tensor."""
    unsq = producers.get(name)
    if unsq is None or unsq.op_type != "Unsqueeze":
        return None
    axes = constants.get(unsq.input[1]) if len(unsq.input) > 1 else node_attribute(unsq, "axes")
    if axes is None or list(np.ravel(axes)) != [0]:
        return None
    gather = producers.get(unsq.input[0])
    if gather is None or gather.op_type != "Gather" or node_attribute(gather, "axis", 0) != 0:
        return None
    index = constants.get(gather.input[1])
    shape = producers.get(gather.input[0])
    if index is None or index.ndim != 0 or shape is None or shape.op_type != "Shape" or shape.attribute:
        return None  # a Shape with start/end numbers its dims differently
    return shape.input[0], int(index)


def _same_dim(data: str, axis: int, source: str, index: int, producers: dict) -> bool:
    """Whether dim `axis` of `data` is by construction dim `index` of `source` (through Transposes)."""
    while data != source:
        node = producers.get(data)
        if node is None or node.op_type != "Transpose":
            return False
        axis = list(node_attribute(node, "perm"))[axis]
        data = node.input[0]
    return axis == index


def _constant_reshape_shape(reshape: onnx.NodeProto, producers: dict, constants: dict) -> list[int] | None:
    if reshape.input[1] in constants or node_attribute(reshape, "allowzero", 0) != 0:
        return None  # already constant, or 0 would mean an empty dim
    concat = producers.get(reshape.input[1])
    if concat is None or concat.op_type != "Concat" or node_attribute(concat, "axis") != 0:
        return None
    shape: list[int] = []
    for part in concat.input:
        if part in constants:
            values = [int(v) for v in np.ravel(constants[part])]
            if 0 in values:
                return None  # a literal 0 placed elsewhere would change meaning with the new 0s
            shape += values
            continue
        ref = _dim_ref(part, producers, constants)
        if ref is None or not _same_dim(reshape.input[0], len(shape), ref[0], ref[1], producers):
            return None
        shape.append(0)
    return shape


def _slice_positions(graph: onnx.GraphProto, producers: dict, constants: dict) -> None:
    """Gather(table, Expand(Unsqueeze(Range(0, Cast(Gather(Shape(ids), 1)), 1), [0]), Shape(ids))) consumed
    only by Adds of a [B, S, D] tensor read from `ids` -> Slice(table, [0], Shape(ids)[1:2], [0])."""
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    for node in list(graph.node):
        if node.op_type != "Gather" or node_attribute(node, "axis", 0) != 0 or node.input[0] not in constants:
            continue
        ids = _positions_of(node.input[1], producers, constants)
        if ids is None or node.output[0] in outputs or _rank(node.input[0], constants) != 2:
            continue
        if not _adds_to_embedding(node, consumers, producers, constants, ids):
            continue
        prefix = node.output[0] + "/sliced"
        zero = numpy_helper.from_array(np.array([0], dtype=np.int64), prefix + "/zero")
        graph.initializer.append(zero)
        length = helper.make_node("Shape", [ids], [prefix + "/length"], start=1, end=2)
        sliced = helper.make_node("Slice", [node.input[0], zero.name, length.output[0], zero.name], [node.output[0]])
        index = list(graph.node).index(node)
        graph.node.remove(node)
        graph.node.insert(index, sliced)
        graph.node.insert(index, length)


def _positions_of(name: str, producers: dict, constants: dict) -> str | None:
    """The ids tensor when `name` is Expand(Unsqueeze(Range(0, Cast(Gather(Shape(ids), 1)), 1), [0]), Shape(ids))."""
    expand = producers.get(name)
    if expand is None or expand.op_type != "Expand":
        return None
    target = producers.get(expand.input[1])
    if target is None or target.op_type != "Shape" or target.attribute:
        return None
    ids = target.input[0]
    unsq = producers.get(expand.input[0])
    if unsq is None or unsq.op_type != "Unsqueeze":
        return None
    axes = constants.get(unsq.input[1]) if len(unsq.input) > 1 else node_attribute(unsq, "axes")
    rng = producers.get(unsq.input[0])
    if axes is None or list(np.ravel(axes)) != [0] or rng is None or rng.op_type != "Range":
        return None
    start, step = constants.get(rng.input[0]), constants.get(rng.input[2])
    if start is None or step is None or int(start) != 0 or int(step) != 1:
        return None
    limit = producers.get(rng.input[1])
    if limit is not None and limit.op_type == "Cast":
        limit = producers.get(limit.input[0])
    if limit is None or limit.op_type != "Gather" or node_attribute(limit, "axis", 0) != 0:
        return None
    index, shape = constants.get(limit.input[1]), producers.get(limit.input[0])
    if index is None or int(index) != 1 or shape is None or shape.op_type != "Shape" or shape.attribute:
        return None
    return ids if shape.input[0] == ids else None


def _rank(name: str, constants: dict) -> int | None:
    return constants[name].ndim if name in constants else None


def _adds_to_embedding(gather: onnx.NodeProto, consumers: dict, producers: dict, constants: dict, ids: str) -> bool:
    """Every consumer is an Add whose other operand is Gather(table, ids) [B, S, D], perhaps times a scalar
    constant: broadcasting [S, D] against it gives the same [B, S, D] sums."""
    users = consumers.get(gather.output[0], [])
    for add in users:
        if add.op_type != "Add" or len(add.input) != 2:
            return False
        other = producers.get(add.input[1] if add.input[0] == gather.output[0] else add.input[0])
        if other is not None and other.op_type == "Mul":
            scalars = [i for i in other.input if i in constants and constants[i].size == 1]
            rest = [i for i in other.input if i not in scalars]
            other = producers.get(rest[0]) if len(scalars) == 1 and len(rest) == 1 else None
        if other is None or other.op_type != "Gather" or other.input[1] != ids or _rank(other.input[0], constants) != 2:
            return False
    return bool(users)


def remove_dead(graph: onnx.GraphProto) -> None:
    """Drop the nodes no graph output depends on, then the initializers and value_info nothing reads."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            keep.append(node)
            needed.update(name for name in node.input if name)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    live_inits = [init for init in graph.initializer if init.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(live_inits)
    produced = {name for node in graph.node for name in node.output}
    live_info = [vi for vi in graph.value_info if vi.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(live_info)
