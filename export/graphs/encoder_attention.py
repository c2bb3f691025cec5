"""The encoder's self-attention as com.microsoft MultiHeadAttention, as the v2 decoder's cross-attention is.

Each layer's attention core (split heads, Q K^T, scale, padding bias, softmax, times V, merge heads: about
20 nodes, and in the int8 graph the row-invariant softmax written out) becomes one node reading the Q, K
and V projections [B, S, D] and `key_padding_mask` = attention_mask as int32 [B, S].

Unlike export/graphs/encoder_simplify.py this is not bitwise: the kernel's softmax rounds differently from the
exported one (the fp32 graph happened to match bit for bit on the parity corpus with ONNX Runtime 1.32;
the int8 graph's cross K/V moved by up to 0.04, quantization magnifying the last bits). So
`attnserve-export simplify-encoder --fused-attention` keeps it only where the gate in
export/pipeline/simplify_encoder.py passes: identical greedy answers on the parity corpus and each row's valid
outputs bitwise the same alone and in a padded batch of 32.
"""

from __future__ import annotations

import onnx
from onnx import helper

from attnserve.export.errors import BuildError
from attnserve.export.graphs.encoder_simplify import remove_dead

MASK = "encoder/key_padding_mask"
PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def fuse_self_attention(model: onnx.ModelProto, n_layers: int, n_heads: int, d_model: int) -> onnx.ModelProto:
    """A copy of `model` (an exported encoder, simplified or not) with MultiHeadAttention in every layer.

    The projections and the merged heads are found by the names training/model.py's modules give them
    (`/encoder_layers.{i}/self_attn/{q,k,v}_proj/Add_output_0`, and the Reshape that feeds the out
    projection); BuildError when a layer does not have them."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    producers = {name: node for node in graph.node for name in node.output}
    fused = []
    for i in range(n_layers):
        prefix = f"/encoder_layers.{i}/self_attn/"
        qkv = [f"{prefix}{p}/Add_output_0" for p in PROJECTIONS]
        merged = _merged_heads(graph, producers, prefix)
        if merged is None or any(name not in producers for name in qkv):
            raise BuildError(f"encoder layer {i}: no self-attention of the exported shape to fuse")
        fused.append(
            helper.make_node(
                "MultiHeadAttention",
                [*qkv, "", MASK],
                [merged.output[0]],
                name=f"{prefix}MultiHeadAttention",
                domain="com.microsoft",
                num_heads=n_heads,
                scale=float((d_model // n_heads) ** -0.5),
            )
        )
        graph.node.insert(list(graph.node).index(merged), fused[-1])
        graph.node.remove(merged)
    graph.node.insert(0, helper.make_node("Cast", ["attention_mask"], [MASK], to=onnx.TensorProto.INT32))
    if not any(o.domain == "com.microsoft" for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    remove_dead(graph)
    return out


def _merged_heads(graph: onnx.GraphProto, producers: dict, prefix: str) -> onnx.NodeProto | None:
    """The Reshape [B, S, H, Dh] -> [B, S, D] after Transpose(0, 2, 1, 3) that ends a layer's attention."""
    for node in graph.node:
        if node.op_type != "Reshape" or not node.output[0].startswith(prefix):
            continue
        transpose = producers.get(node.input[0])
        if transpose is None or transpose.op_type != "Transpose":
            continue
        perm = [a.ints for a in transpose.attribute if a.name == "perm"]
        if perm and list(perm[0]) == [0, 2, 1, 3]:
            return node
    return None
