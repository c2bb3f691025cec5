"""Export the Transformer as two ONNX graphs with the names of Contract 2 (service/engine/names.py).

- encoder.onnx: runs once per request. Besides the additive source bias it
  projects every decoder layer's cross-attention K/V here, once, so decoder
  steps never recompute or copy them (the layout CTranslate2 and ONNX
  Runtime's own T5 tooling use).
- decoder.onnx: ONE step over T new tokens (T = 1 when serving) against the
  self-attention cache; no `If` node: P = 0 on the first step is just an empty
  past. `decoder_attention_mask` [B, P+T] lets rows with different real past
  lengths share a step (their missing slots are 0).

The TorchScript exporter (`dynamo=False`) is used: it keeps every batch,
length and past axis symbolic (export/checks/graph_parity.py runs the graphs at other sizes to
prove none was frozen).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch
from onnx import external_data_helper, numpy_helper
from torch import Tensor, nn

# the opset, the IR version and the io record live in export/graphs/format.py, which a machine without torch imports
from attnserve.export.graphs.format import MAX_IR_VERSION, OPSET
from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEXT_TOKEN,
    POSITION_IDS,
    cross_attention_names,
    decoder_io,
    encoder_io,
    past_names,
    present_names,
)
from attnserve.training.model import Transformer, decoder_self_bias


class EncoderGraph(nn.Module):
    """(input_ids [B,S], attention_mask [B,S]) -> bias [B,1,1,S], then (K, V) [B,H,S,Dh] per decoder layer."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        memory, bias = self.model.encode(input_ids, attention_mask)
        flat = [t for kv in self.model.cross_kv(memory) for t in kv]
        return (bias, *flat)


class DecoderGraph(nn.Module):
    """One cached decoder step. Inputs in `decoder_io` order (service/engine/names.py); outputs:
    logits [B,V] (last position), present self K/V [B,H,P+T,Dh] per layer,
    next_token [B] (in-graph argmax, saves greedy a pass over logits in Python),
    and with `explain` the cross-attention weights [B,H,T,S] per layer."""

    def __init__(self, model: Transformer, next_token: bool = True, explain: bool = False):
        super().__init__()
        self.model = model
        self.n_layers = model.cfg.n_decoder_layers
        self.next_token = next_token
        self.explain = explain

    def forward(self, input_ids, position_ids, decoder_attention_mask, encoder_attention_bias, *caches):
        n = self.n_layers
        past = [(caches[2 * i], caches[2 * i + 1]) for i in range(n)]
        cross = [(caches[2 * n + 2 * i], caches[2 * n + 2 * i + 1]) for i in range(n)]
        self_bias = decoder_self_bias(decoder_attention_mask, input_ids.shape[1])  # [B,1,T,P+T]
        logits, presents, cross_weights = self.model.decode(
            input_ids, position_ids, self_bias, cross, encoder_attention_bias, past
        )
        # a model that projects only the last position returns its [B, V] logits: the head's own output is then the
        # graph's, written straight into the bound buffer, where taking the last position would copy [B, V] a step
        last = logits if getattr(self.model, "LAST_POSITION_LOGITS", False) else logits[:, -1, :]  # [B, V]
        out: list[Tensor] = [last, *[t for kv in presents for t in kv]]
        if self.next_token:
            out.append(torch.argmax(last, dim=-1))  # [B] int64
        if self.explain:
            out += cross_weights
        return tuple(out)


def example_inputs(model: Transformer, b: int = 2, s: int = 5, p: int = 3, t: int = 1) -> tuple[tuple, tuple]:
    """Dummy inputs for tracing: sizes > 1 and distinct, so no axis is mistaken for a constant."""
    cfg = model.cfg
    h, dh, n = cfg.n_heads, cfg.head_dim, cfg.n_decoder_layers
    src = torch.randint(4, cfg.src_vocab_size, (b, s))
    src_mask = torch.ones(b, s, dtype=torch.long)
    tgt = torch.randint(4, cfg.tgt_vocab_size, (b, t))
    pos = torch.arange(p, p + t)[None, :].expand(b, t).contiguous()
    dec_mask = torch.ones(b, p + t, dtype=torch.long)
    bias = torch.zeros(b, 1, 1, s)
    past = [torch.randn(b, h, p, dh) for _ in range(2 * n)]
    cross = [torch.randn(b, h, s, dh) for _ in range(2 * n)]
    return (src, src_mask), (tgt, pos, dec_mask, bias, *past, *cross)


def _save(path: Path) -> None:
    """Reload the exported file, lower its IR version to what ONNX Runtime loads, check, save."""
    m = onnx.load(str(path))
    m.ir_version = min(m.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def export_encoder(model: Transformer, path: Path) -> None:
    enc_in, _ = example_inputs(model)
    names_in, names_out = encoder_io(model.cfg.n_decoder_layers)
    axes = {INPUT_IDS: {0: "B", 1: "S"}, ATTENTION_MASK: {0: "B", 1: "S"}, ENCODER_ATTENTION_BIAS: {0: "B", 3: "S"}}
    axes.update({name: {0: "B", 2: "S"} for name in names_out[1:]})
    _trace(EncoderGraph(model).eval(), enc_in, path, names_in, names_out, axes)


def _trace(module, inputs, path: Path, names_in, names_out, axes) -> None:
    """TorchScript export (dynamo=False, see the module docstring) with every named axis dynamic."""
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about Python ints taken from shapes; export/checks/graph_parity.py runs the graphs at
        # other sizes to prove no axis was frozen, so the warning is noise here.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module,
            inputs,
            str(path),
            input_names=names_in,
            output_names=names_out,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    _save(path)


def export_decoder(model: Transformer, path: Path, next_token: bool = True, explain: bool = False) -> None:
    _, dec_in = example_inputs(model)
    n = model.cfg.n_decoder_layers
    names_in, names_out = decoder_io(n, next_token, explain)
    axes: dict[str, dict[int, str]] = {
        INPUT_IDS: {0: "B", 1: "T"},
        POSITION_IDS: {0: "B", 1: "T"},
        DECODER_ATTENTION_MASK: {0: "B", 1: "P_plus_T"},
        ENCODER_ATTENTION_BIAS: {0: "B", 3: "S"},
        LOGITS: {0: "B"},
    }
    axes.update({name: {0: "B", 2: "P"} for name in past_names(n, DECODER)})
    axes.update({name: {0: "B", 2: "S"} for name in past_names(n, ENCODER)})
    axes.update({name: {0: "B", 2: "P_plus_T"} for name in present_names(n, DECODER)})
    if next_token:
        axes[NEXT_TOKEN] = {0: "B"}
    if explain:
        axes.update({name: {0: "B", 2: "T", 3: "S"} for name in cross_attention_names(n)})
    _trace(DecoderGraph(model, next_token, explain).eval(), dec_in, path, names_in, names_out, axes)
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    if "If" in ops or "Loop" in ops:
        raise RuntimeError(f"{path.name}: the one-step decoder must have no control flow, found {ops & {'If', 'Loop'}}")


SHARED_DATA_ALIGNMENT = 4096  # page-aligned offsets let ONNX Runtime map the weights instead of copying them


def share_initializers(paths: list[Path], data_path: Path, min_bytes: int = 1024) -> dict:
    """Move the large initializers of several graphs into ONE external-data file, each distinct tensor
    written once, so graphs that hold the same weights (decoder.onnx and decoder.explain.onnx are two
    traces of one model) store them once on disk.  Tensors are matched by their bytes, dtype and
    shape, not by name: two traces may name the same weight differently.  Smaller tensors stay inline.
    ONNX Runtime resolves the file relative to each graph, so `data_path` sits beside them.
    Returns {"tensors": written, "references": external references, "bytes": data file size}."""
    written: dict[tuple, tuple[int, int]] = {}
    references = 0
    with open(data_path, "wb") as data:
        for path in paths:
            model = onnx.load(str(path))
            for tensor in model.graph.initializer:
                raw = numpy_helper.to_array(tensor).tobytes()  # raw_data, or the typed fields as bytes
                if len(raw) < min_bytes:
                    continue
                key = (tensor.data_type, tuple(tensor.dims), raw)
                if key not in written:
                    offset = -(-data.tell() // SHARED_DATA_ALIGNMENT) * SHARED_DATA_ALIGNMENT
                    data.seek(offset)
                    data.write(raw)
                    written[key] = (offset, len(raw))
                offset, length = written[key]
                tensor.raw_data = raw  # set_external_data wants raw_data present; it is cleared next
                external_data_helper.set_external_data(tensor, location=data_path.name, offset=offset, length=length)
                tensor.data_location = onnx.TensorProto.EXTERNAL
                for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
                    tensor.ClearField(field)
                references += 1
            onnx.save(model, str(path))
    return {"tensors": len(written), "references": references, "bytes": data_path.stat().st_size}
