"""A bundle's trainable weights, read back from its own fp32 v1 graphs (no torch here).

`load_bundle_weights(bundle_dir)` returns the model config (bundle.json `config`) and a
state_dict keyed by `attnserve.training.model.Transformer`'s parameter names, as numpy arrays, so a
trainer can start from a shipped bundle (`attnserve-train --init-from`) and a graph
rewriter can rebuild other graphs from the same weights.

The TorchScript exporter names the graphs' initializers unevenly: biases, LayerNorm and
embedding tables keep their parameter names (`model.` prefixed), the Linear weights become
anonymous transposed constants (`onnx::MatMul_569`), and initializers of equal value are
merged into one that the others reach through `Identity` nodes. So the mapping reads the graphs by structure, not by name:
- a `Gather` whose indices are the graph input `input_ids` reads the token embedding; another
  `Gather` of a 2-D initializer reads the position table (a parameter only when learned);
- a `MatMul` with a constant right-hand side is a Linear layer (weight = its transpose), its
  bias the constant of the `Add` that consumes it;
- a `LayerNormalization` node carries a LayerNorm's weight and bias.
Each kind appears in the graph in the order the model runs (the trace records execution
order), which `_expected` spells out from the config. Counts and shapes are checked, and a
bias that kept its parameter name must sit where that name is expected, so a graph this
mapping does not understand is an error, never a silently wrong model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ENCODER, DECODER = "encoder", "decoder"


class WeightsError(ValueError):
    """The bundle's fp32 graphs do not hold the weights its config describes; one line."""


def load_bundle_weights(bundle_dir: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(model config, state_dict) of the bundle in `bundle_dir`, read from its v1 fp32 graphs.

    The state_dict has every key `Transformer(ModelConfig.from_dict(config)).state_dict()` has,
    float32 arrays of the parameters' shapes; with tied embeddings `lm_head.weight` is the
    target token embedding.
    """
    bundle_dir = Path(bundle_dir)
    meta_path = bundle_dir / "bundle.json"
    if not meta_path.is_file():
        raise WeightsError(f"{bundle_dir}: no bundle.json (is it a model bundle?)")
    meta = json.loads(meta_path.read_text())
    config = dict(meta["config"])
    files = meta.get("variants", {}).get("fp32") or {ENCODER: "encoder.onnx", DECODER: "decoder.onnx"}
    state: dict[str, np.ndarray] = {}
    for graph in (ENCODER, DECODER):
        path = bundle_dir / files[graph]
        if not path.is_file():
            raise WeightsError(f"{bundle_dir}: the fp32 {graph} graph {files[graph]} is missing")
        _check_io(meta, graph, path)
        state.update(_read_graph(path, graph, config))
    if config.get("tie_embeddings", True):
        state["lm_head.weight"] = state["tgt_embed.tokens.weight"]
    return config, state


def _check_io(meta: dict, graph: str, path: Path) -> None:
    """The graph must have the inputs bundle.json `io` lists for it (a v1 graph, not a fused one)."""
    recorded = [v["name"] for v in meta.get("io", {}).get(graph, {}).get("inputs", [])]
    if not recorded:
        return
    model = onnx.load(str(path), load_external_data=False)
    present = [v.name for v in model.graph.input]
    if present != recorded:
        raise WeightsError(f"{path}: inputs {present} differ from bundle.json io.{graph}.inputs {recorded}")


def _linear(prefix: str) -> tuple[str, str]:
    return ("linear", prefix)


def _norm(prefix: str) -> tuple[str, str]:
    return ("norm", prefix)


def _expected(graph: str, config: dict) -> list[tuple[str, str]]:
    """The parametric operations of `graph`, in the order `Transformer` runs them: (kind, module name)."""
    pre = config.get("norm_placement", "pre") == "pre"
    ops: list[tuple[str, str]] = []

    def residual(name: str, body: list[tuple[str, str]]) -> None:
        # pre-norm normalizes the sublayer's input; post-norm the sum after it
        ops.extend(([_norm(f"{name}.norm")] if pre else []) + body + ([] if pre else [_norm(f"{name}.norm")]))

    def attention(name: str, kv: bool = True) -> list[tuple[str, str]]:
        names = ["q_proj", "k_proj", "v_proj", "out_proj"] if kv else ["q_proj", "out_proj"]
        return [_linear(f"{name}.{p}") for p in names]

    def ffn(name: str) -> list[tuple[str, str]]:
        return [_linear(f"{name}.ffn.up"), _linear(f"{name}.ffn.down")]

    if graph == ENCODER:
        for i in range(config["n_encoder_layers"]):
            layer = f"encoder_layers.{i}"
            residual(f"{layer}.attn_res", attention(f"{layer}.self_attn"))
            residual(f"{layer}.ffn_res", ffn(layer))
        if pre:
            ops.append(_norm("encoder_norm"))
        for i in range(config["n_decoder_layers"]):  # cross-attention K/V are projected once, here
            ops += [_linear(f"decoder_layers.{i}.cross_attn.k_proj"), _linear(f"decoder_layers.{i}.cross_attn.v_proj")]
    else:
        for i in range(config["n_decoder_layers"]):
            layer = f"decoder_layers.{i}"
            residual(f"{layer}.self_res", attention(f"{layer}.self_attn"))
            residual(f"{layer}.cross_res", attention(f"{layer}.cross_attn", kv=False))
            residual(f"{layer}.ffn_res", ffn(layer))
        if pre:
            ops.append(_norm("decoder_norm"))
        ops.append(_linear("lm_head"))
    return ops


class _Graph:
    """Constant values of a graph (initializers, Constant nodes, Transposes of them) and its consumers."""

    def __init__(self, path: Path):
        self.path = path
        self.model = onnx.load(str(path))  # external data resolved relative to the graph
        g = self.model.graph
        self.inputs = {v.name for v in g.input}
        self.values = {t.name: t for t in g.initializer}
        self.producers = {out: node for node in g.node for out in node.output}
        self.consumers: dict[str, list] = {}
        for node in g.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of `name` when it is a constant of the graph, else None."""
        if name in self.values:
            return numpy_helper.to_array(self.values[name])
        node = self.producers.get(name)
        if node is None:
            return None
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
            return None
        if node.op_type == "Identity":  # how the exporter refers to an initializer merged with an equal one
            return self.constant(node.input[0])
        if node.op_type == "Transpose":
            inner = self.constant(node.input[0])
            if inner is None:
                return None
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            return np.transpose(inner, perm)
        return None


def _read_graph(path: Path, graph: str, config: dict) -> dict[str, np.ndarray]:
    g = _Graph(path)
    linears: list[tuple[np.ndarray, np.ndarray | None, str | None]] = []  # (W [out, in], bias, bias name)
    norms: list[tuple[np.ndarray, np.ndarray]] = []
    tokens: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    for node in g.model.graph.node:
        if node.op_type == "MatMul":
            w = g.constant(node.input[1])
            if w is None or w.ndim != 2:
                continue  # an attention product of two activations
            bias, bias_name = None, None
            for consumer in g.consumers.get(node.output[0], []):
                if consumer.op_type != "Add":
                    continue
                other = next((i for i in consumer.input if i != node.output[0]), None)
                value = None if other is None else g.constant(other)
                if value is not None and value.ndim == 1:
                    bias, bias_name = value, other
                    break
            linears.append((np.ascontiguousarray(w.T), bias, bias_name))
        elif node.op_type == "LayerNormalization":
            scale, shift = g.constant(node.input[1]), g.constant(node.input[2]) if len(node.input) > 2 else None
            if scale is None or shift is None:
                raise WeightsError(f"{path}: LayerNormalization {node.name!r} has a non-constant scale or bias")
            norms.append((scale, shift))
        elif node.op_type == "Gather":
            table = g.constant(node.input[0])
            if table is None or table.ndim != 2 or not np.issubdtype(table.dtype, np.floating):
                continue
            (tokens if node.input[1] == "input_ids" else positions).append(table)

    expected = _expected(graph, config)
    want_linear = [name for kind, name in expected if kind == "linear"]
    want_norm = [name for kind, name in expected if kind == "norm"]
    if len(linears) != len(want_linear) or len(norms) != len(want_norm) or len(tokens) != 1:
        raise WeightsError(
            f"{path}: found {len(linears)} linear layers, {len(norms)} LayerNorms and {len(tokens)} token embeddings; "
            f"the bundle's config describes {len(want_linear)}, {len(want_norm)} and 1"
        )
    embed = "src_embed" if graph == ENCODER else "tgt_embed"
    state = {f"{embed}.tokens.weight": tokens[0]}
    if config.get("pos_encoding") == "learned":
        if len(positions) != 1:
            raise WeightsError(f"{path}: expected one learned position table, found {len(positions)}")
        state[f"{embed}.positions.weight"] = positions[0]
    for name, (w, b, bias_name) in zip(want_linear, linears):
        if bias_name and bias_name.startswith("model.") and bias_name.endswith(".bias") and bias_name != f"model.{name}.bias":
            raise WeightsError(f"{path}: the linear layer expected to be {name} reads {bias_name}; graph order not understood")
        state[f"{name}.weight"] = w
        if name != "lm_head":
            if b is None:
                raise WeightsError(f"{path}: linear layer {name} has no bias in the graph")
            state[f"{name}.bias"] = b
    for name, (scale, shift) in zip(want_norm, norms):
        state[f"{name}.weight"], state[f"{name}.bias"] = scale, shift
    d_model, d_ff = config["d_model"], config["d_ff"]
    for key, value in state.items():
        shape = _expected_shape(key, d_model, d_ff, config)
        if shape is not None and tuple(value.shape) != shape:
            raise WeightsError(f"{path}: {key} has shape {tuple(value.shape)}, the config says {shape}")
    return {k: np.array(v, dtype=np.float32) for k, v in state.items()}  # writable copies (torch.from_numpy)


def _expected_shape(key: str, d: int, f: int, config: dict) -> tuple[int, ...] | None:
    if key.endswith("ffn.up.weight"):
        return (f, d)
    if key.endswith("ffn.down.weight"):
        return (d, f)
    if key.endswith("ffn.up.bias"):
        return (f,)
    if key.endswith("_proj.weight"):
        return (d, d)
    if key == "src_embed.tokens.weight":
        return (config["src_vocab_size"], d)
    if key in ("tgt_embed.tokens.weight", "lm_head.weight"):
        return (config["tgt_vocab_size"], d)
    if key.endswith(".bias") or key.endswith("norm.weight"):
        return (d,)
    return None
