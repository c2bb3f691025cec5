"""The v2 decoder (Contract 2, version 2): one fused step over an in-place self-attention cache.

Written by hand from a state_dict (the PyTorch parameter names of training/model.py), not traced:
its attention is ONNX Runtime's contrib operators (domain `com.microsoft`), which no exporter emits.
Per decoder layer, at T = 1 new token per row:

    h   = LayerNormalization(x)                               # pre-norm (post-norm: after the Add)
    qkv = MatMul(h, [Wq/sqrt(Dh) | Wk | Wv]) + b              # ONE fused projection [B, 1, 3D]
    a   = GroupQueryAttention(qkv, past K, past V, past_lengths, total_sequence_length, scale=1)
    x   = x + MatMul(a, Wo) + bo                              # Add, then the next LayerNormalization
    c   = MultiHeadAttention(MatMul(h', Wq'/sqrt(Dh)) + b, cross K, cross V, encoder_attention_bias, scale=1)
    x   = x + MatMul(c, Wo') + bo'
    x   = x + MatMul(act(MatMul(h'', W1) + b1), W2) + b2

then the final LayerNormalization, the output projection to `logits` [B, V] and the in-graph
`next_token` argmax [B].

- The self-attention cache `past_key_values.{i}.decoder.key/value` is a buffer [B, H, Pmax, Dh]
  (Pmax = max_target_len) that the engine binds through IOBinding as both the past input and the
  `present.{i}.decoder.*` output: GroupQueryAttention writes the new K/V at position
  `past_lengths[b]` of row b and reads positions below it, so a step copies nothing.
- Cross-attention reads the encoder's projected K/V [B, H, S, Dh] with the additive
  `encoder_attention_bias` [B, 1, 1, S]; S padded to a multiple of service/engine/slots.py's
  CROSS_KEY_MULTIPLE keeps every row's sums bitwise the same alone and in any batch (docs/ARCHITECTURE.md, "v2").
- The attention scale 1/sqrt(Dh) is folded into the Q weights and bias when it is a power of two
  (exact, so no rounding changes) and the operators run with scale=1.0: their default scale takes a
  slower path in ONNX Runtime's CPU kernels. Otherwise the scale stays an attribute.
- `Add` + `LayerNormalization`, not `SkipLayerNormalization`: the latter's CPU kernel measured
  slower, and ONNX Runtime fuses the pair back unless `SkipLayerNormFusion` is disabled
  (service/engine/slots.py's `V2_DISABLED_OPTIMIZERS`, which the engine passes to its sessions).

`write_decoder_v2` writes the float32 graph; `export/graphs/variants.py`'s static quantizer turns it into
the int8 variant (every MatMul with a constant weight and its bias Add become QuantizeLinear +
MatMulIntegerToFloat with fixed activation scales), so the QKV projection is one
MatMulIntegerToFloat; `convert_fp16` gives the CUDA variant.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.graphs.format import MAX_IR_VERSION, OPSET
from attnserve.service.engine.names import DECODER as SELF
from attnserve.service.engine.names import (
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEXT_TOKEN,
    PAST_LENGTHS,
    POSITION_IDS,
    TOTAL_SEQUENCE_LENGTH,
    decoder_v2_io,
    past_names,
    present_names,
)
from attnserve.service.engine.slots import V2_DISABLED_OPTIMIZERS

MS_DOMAIN = "com.microsoft"
DISABLED_OPTIMIZERS = V2_DISABLED_OPTIMIZERS  # keep Add + LayerNormalization (see the module docstring)
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, as training/model.py uses it
V2_CONTRIB_OPS = ("GroupQueryAttention", "MultiHeadAttention")  # the kernels a runtime must have to serve v2


def sinusoidal_table(max_len: int, d_model: int) -> np.ndarray:
    """training/model.py's position table, computed the same way (float64, then float32). [max_len, D]"""
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    angle = pos / np.power(10000.0, two_i / d_model)
    table = np.zeros((max_len, d_model), np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return table.astype(np.float32)


def _scale_folds(head_dim: int) -> bool:
    """1/sqrt(Dh) is an exact power of two (Dh = 4, 16, 64, 256...): folding it into W changes no rounding."""
    root = math.isqrt(head_dim)
    return root * root == head_dim and root & (root - 1) == 0


class _Graph:
    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, n_out: int = 1, domain: str = "", **attrs) -> list[str]:
        outs = [f"{name}/out{k}" if n_out > 1 else f"{name}/out" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain, **attrs))
        return outs

    def linear(self, x: str, w: np.ndarray, b: np.ndarray | None, name: str) -> str:
        """x @ W^T + b for a torch Linear weight W [out, in]: MatMul then the bias Add (the int8 quantizer folds
        the pair into one MatMulIntegerToFloat)."""
        (y,) = self.node("MatMul", [x, self.const(f"{name}/weight", w.T.astype(np.float32))], f"{name}/MatMul")
        if b is None:
            return y
        (y,) = self.node("Add", [y, self.const(f"{name}/bias", b.astype(np.float32))], f"{name}/Add")
        return y

    def layer_norm(self, x: str, state: dict, prefix: str, name: str) -> str:
        w = self.const(f"{name}/weight", state[f"{prefix}.weight"].astype(np.float32))
        b = self.const(f"{name}/bias", state[f"{prefix}.bias"].astype(np.float32))
        (y,) = self.node("LayerNormalization", [x, w, b], name, axis=-1, epsilon=LAYER_NORM_EPS)
        return y


class _DecoderV2Graph(_Graph):
    """The v2 decoder of one model, built block by block: each method appends its nodes in the order they run
    and returns the name of its output. `config` is bundle.json `config`; `state` maps training/model.py's
    parameter names to numpy arrays."""

    def __init__(self, config: dict, state: dict[str, np.ndarray]):
        super().__init__()
        self.config, self.state = config, state
        self.d, self.h, self.n_layers = int(config["d_model"]), int(config["n_heads"]), int(config["n_decoder_layers"])
        self.dh = self.d // self.h
        self.pre = config.get("norm_placement", "pre") == "pre"
        fold = _scale_folds(self.dh)
        self.q_scale = np.float32(1.0 / math.sqrt(self.dh)) if fold else np.float32(1.0)  # into Q's weight and bias
        self.attn_scale = 1.0 if fold else 1.0 / math.sqrt(self.dh)  # the attention operators' `scale`
        self.self_past, self.cross_past = past_names(self.n_layers, SELF), past_names(self.n_layers, ENCODER)
        self.self_present = present_names(self.n_layers, SELF)

    def param_linear(self, x: str, prefix: str, name: str) -> str:
        """The torch Linear `prefix` (its `.weight` and `.bias` in `state`) applied to x."""
        return self.linear(x, self.state[f"{prefix}.weight"], self.state[f"{prefix}.bias"], name)

    def embedding(self) -> str:
        """token * sqrt(D) (folded into the table: the same float32 product) + position. [B, 1, D]"""
        tokens = self.state["tgt_embed.tokens.weight"].astype(np.float32) * np.float32(math.sqrt(self.d))
        if self.config.get("pos_encoding", "sinusoidal") == "learned":
            positions = self.state["tgt_embed.positions.weight"].astype(np.float32)
        else:
            positions = sinusoidal_table(int(self.config["max_target_len"]) + 1, self.d)
        (tok,) = self.node("Gather", [self.const("embed/tokens", tokens), INPUT_IDS], "embed/Tokens")
        (pos,) = self.node("Gather", [self.const("embed/positions", positions), POSITION_IDS], "embed/Positions")
        (x,) = self.node("Add", [tok, pos], "embed/Add")
        return x

    def decoder_layer(self, x: str, i: int) -> str:
        x = self.residual(x, i, "self", self.self_attention)
        x = self.residual(x, i, "cross", self.cross_attention)
        return self.residual(x, i, "ffn", self.feed_forward)

    def residual(self, x: str, i: int, sublayer: str, body) -> str:
        """Residual around `body(h, i)`, sublayer "self", "cross" or "ffn" of layer i: pre-norm x + body(LN(x)),
        post-norm LN(x + body(x))."""
        norm, name = f"decoder_layers.{i}.{sublayer}_res.norm", f"layer{i}/{sublayer}"
        inner = self.layer_norm(x, self.state, norm, f"{name}/LayerNorm") if self.pre else x
        (y,) = self.node("Add", [x, body(inner, i)], f"{name}/Residual")
        return y if self.pre else self.layer_norm(y, self.state, norm, f"{name}/LayerNorm")

    def self_attention(self, h: str, i: int) -> str:
        """One fused QKV projection [B, 1, 3D], GroupQueryAttention over layer i's in-place cache, the out projection."""
        a, s = f"decoder_layers.{i}.self_attn", self.state
        w = np.concatenate([s[f"{a}.q_proj.weight"] * self.q_scale, s[f"{a}.k_proj.weight"], s[f"{a}.v_proj.weight"]])
        b = np.concatenate([s[f"{a}.q_proj.bias"] * self.q_scale, s[f"{a}.k_proj.bias"], s[f"{a}.v_proj.bias"]])
        qkv = self.linear(h, w, b, f"layer{i}/self/qkv")
        past, present = self.self_past[2 * i : 2 * i + 2], self.self_present[2 * i : 2 * i + 2]
        self.nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                [qkv, "", "", *past, PAST_LENGTHS, TOTAL_SEQUENCE_LENGTH],
                [f"layer{i}/self/attention", *present],
                name=f"layer{i}/self/GroupQueryAttention",
                domain=MS_DOMAIN,
                num_heads=self.h,
                kv_num_heads=self.h,
                scale=self.attn_scale,
            )
        )
        return self.param_linear(f"layer{i}/self/attention", f"{a}.out_proj", f"layer{i}/self/out")

    def cross_attention(self, h: str, i: int) -> str:
        """The Q projection, MultiHeadAttention over the encoder's K/V under `encoder_attention_bias`, the out projection."""
        a, s = f"decoder_layers.{i}.cross_attn", self.state
        q = self.linear(h, s[f"{a}.q_proj.weight"] * self.q_scale, s[f"{a}.q_proj.bias"] * self.q_scale, f"layer{i}/cross/q")
        (c,) = self.node(
            "MultiHeadAttention",
            [q, *self.cross_past[2 * i : 2 * i + 2], "", "", ENCODER_ATTENTION_BIAS],
            f"layer{i}/cross/MultiHeadAttention",
            domain=MS_DOMAIN,
            num_heads=self.h,
            scale=self.attn_scale,
        )
        return self.param_linear(c, f"{a}.out_proj", f"layer{i}/cross/out")

    def feed_forward(self, h: str, i: int) -> str:
        p = f"decoder_layers.{i}.ffn"
        up = self.param_linear(h, f"{p}.up", f"layer{i}/ffn/up")
        if self.config.get("activation", "relu") == "gelu":
            (act,) = self.node("Gelu", [up], f"layer{i}/ffn/Gelu", domain=MS_DOMAIN)  # exact (erf), as nn.GELU()
        else:
            (act,) = self.node("Relu", [up], f"layer{i}/ffn/Relu")
        return self.param_linear(act, f"{p}.down", f"layer{i}/ffn/down")

    def output(self, x: str, next_token: bool) -> None:
        """The final LayerNormalization (pre-norm), `logits` [B, V] and, with `next_token`, its argmax [B]."""
        if self.pre:
            x = self.layer_norm(x, self.state, "decoder_norm", "final/LayerNorm")
        lm_head = self.state["lm_head.weight"] if "lm_head.weight" in self.state else self.state["tgt_embed.tokens.weight"]
        logits3 = self.linear(x, lm_head, None, "final/lm_head")  # [B, 1, V]
        axis1 = self.const("final/axis1", np.array([1], np.int64))
        self.nodes.append(helper.make_node("Squeeze", [logits3, axis1], [LOGITS], name="final/Squeeze"))
        if next_token:
            self.nodes.append(helper.make_node("ArgMax", [LOGITS], [NEXT_TOKEN], name="final/ArgMax", axis=-1, keepdims=0))

    def io_types(self) -> dict[str, tuple[int, list]]:
        """Element type and shape of every graph input and output, by name."""
        kv = ["B", self.h, "Pmax", self.dh]
        return {
            INPUT_IDS: (TensorProto.INT64, ["B", 1]),
            POSITION_IDS: (TensorProto.INT32, ["B", 1]),
            PAST_LENGTHS: (TensorProto.INT32, ["B"]),
            TOTAL_SEQUENCE_LENGTH: (TensorProto.INT32, [1]),
            ENCODER_ATTENTION_BIAS: (TensorProto.FLOAT, ["B", 1, 1, "S"]),
            LOGITS: (TensorProto.FLOAT, ["B", int(self.config["tgt_vocab_size"])]),
            NEXT_TOKEN: (TensorProto.INT64, ["B"]),
            **{name: (TensorProto.FLOAT, kv) for name in self.self_past + self.self_present},
            **{name: (TensorProto.FLOAT, ["B", self.h, "S", self.dh]) for name in self.cross_past},
        }

    def model(self, next_token: bool) -> onnx.ModelProto:
        """The checked model of the nodes appended so far, its io in `decoder_v2_io` order."""
        names_in, names_out = decoder_v2_io(self.n_layers, next_token)
        types = self.io_types()
        graph = helper.make_graph(
            self.nodes,
            "decoder_v2",
            [helper.make_tensor_value_info(name, *types[name]) for name in names_in],
            [helper.make_tensor_value_info(name, *types[name]) for name in names_out],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)])
        model.ir_version = MAX_IR_VERSION
        onnx.checker.check_model(model)
        return model


def decoder_v2_model(config: dict, state: dict[str, np.ndarray], next_token: bool = True) -> onnx.ModelProto:
    """The v2 float32 decoder of the model `config` (bundle.json `config`) with weights `state`
    (numpy arrays under training/model.py's parameter names); io in `attnserve.service.engine.names.decoder_v2_io`."""
    g = _DecoderV2Graph(config, state)
    x = g.embedding()  # [B, 1, D]
    for i in range(g.n_layers):
        x = g.decoder_layer(x, i)  # self-attention over the in-place cache, cross-attention, feed-forward
    g.output(x, next_token)  # final norm, logits [B, V], next_token [B]
    return g.model(next_token)


def write_decoder_v2(config: dict, state: dict[str, np.ndarray], path: Path, next_token: bool = True) -> dict:
    """Write the v2 float32 decoder to `path`; returns {"nodes": count in the file}."""
    model = decoder_v2_model(config, state, next_token)
    onnx.save(model, str(path))
    return {"nodes": len(model.graph.node)}
