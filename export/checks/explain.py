"""decoder.explain.onnx: the one-step decoder that also returns its cross-attention weights (POST /explain).

The same graph as decoder.onnx (same inputs; logits, present self K/V and
next_token) plus one output per decoder layer:

    cross_attentions.{i}  float32 [B, H, T, S]   softmax weights over the source, rows sum to 1

It is a separate file so that decoder.onnx, the graph every served token goes
through, computes and copies nothing more: serving speed does not change.
bundle.json records it as

    "explain": {"encoder": "encoder.onnx", "decoder": "decoder.explain.onnx",
                "outputs": ["cross_attentions.0", ...], "shape": ["B", "H", "T", "S"],
                "parity": {...measured at export...}}
    "io": {..., "decoder.explain": {"inputs": [...], "outputs": [...]}}

and lists the file in "files", so the loader verifies its sha256 like any graph.
The encoder is the fp32 one: /explain always decodes in fp32, whatever variant serves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from export.errors import BuildError
from export.graphs.format import graph_io
from export.graphs.v1 import DecoderGraph, example_inputs, export_decoder
from service.engine.names import cross_attention_names, decoder_io
from service.engine.runtime import session_options
from training.model import Transformer

EXPLAIN_DECODER = "decoder.explain.onnx"
EXPLAIN_IO_KEY = "decoder.explain"
ATTENTION_TOLERANCE = 1e-4  # max |ONNX - PyTorch| of any attention weight, and of any row sum - 1


def add_explain_graph(model: Transformer, bundle_dir: Path, meta: dict, encoder_file: str = "encoder.onnx") -> dict:
    """Export decoder.explain.onnx into `bundle_dir`, check it against PyTorch, and record it in `meta`
    (the bundle.json dict being built: its "explain" entry and io["decoder.explain"]). Returns the entry.

    Raises BuildError when the graph's weights differ from the model's by more than
    ATTENTION_TOLERANCE or a row does not sum to 1.
    """
    path = Path(bundle_dir) / EXPLAIN_DECODER
    export_decoder(model, path, next_token=True, explain=True)
    figures = attention_parity(model, path)
    if not figures["ok"]:
        raise BuildError(f"{EXPLAIN_DECODER}: cross-attention differs from PyTorch ({figures})")
    n = model.cfg.n_decoder_layers
    entry = {
        "encoder": encoder_file,
        "decoder": EXPLAIN_DECODER,
        "outputs": cross_attention_names(n),
        "shape": ["B", "H", "T", "S"],
        "parity": figures,
    }
    meta["explain"] = entry
    meta.setdefault("io", {})[EXPLAIN_IO_KEY] = graph_io(path)
    return entry


@torch.no_grad()
def attention_parity(model: Transformer, path: Path, b: int = 3, s: int = 7, p: int = 4, seed: int = 0) -> dict:
    """Run the explain graph and the PyTorch DecoderGraph on the same random step (rows with padded
    sources and padded pasts, as a served batch has) and compare.  Figures: max abs diff of the
    cross-attention weights and of the logits, max |row sum - 1|, max weight on a padded source key."""
    model = model.eval()
    torch.manual_seed(seed)
    _, inputs = example_inputs(model, b=b, s=s, p=p, t=1)
    inputs = list(inputs)
    n = model.cfg.n_decoder_layers
    # row r: source length s - r (bias -1e9 on the padding), past length p - r (mask 0 on the left)
    src_len = [max(1, s - r) for r in range(b)]
    bias = torch.zeros(b, 1, 1, s)
    mask = torch.ones(b, p + 1, dtype=torch.long)
    for r in range(b):
        bias[r, 0, 0, src_len[r] :] = -1e9
        mask[r, : min(r, p)] = 0
    inputs[2], inputs[3] = mask, bias
    names_in, names_out = decoder_io(n, next_token=True, explain=True)
    expected = DecoderGraph(model, next_token=True, explain=True)(*inputs)
    session = ort.InferenceSession(str(path), session_options(threads=1), providers=["CPUExecutionProvider"])
    got = session.run(names_out, {k: v.numpy() for k, v in zip(names_in, inputs)})
    first = len(names_out) - n  # the cross_attentions.{i} outputs come last
    attn_diff = max(float(np.abs(g - e.numpy()).max()) for g, e in zip(got[first:], expected[first:]))
    logits_diff = float(np.abs(got[0] - expected[0].numpy()).max())
    row_sum_err = max(float(np.abs(g.sum(-1) - 1.0).max()) for g in got[first:])
    pad_weight = max(float(g[r, :, :, src_len[r] :].max(initial=0.0)) for g in got[first:] for r in range(b))
    ok = attn_diff <= ATTENTION_TOLERANCE and row_sum_err <= ATTENTION_TOLERANCE and logits_diff <= ATTENTION_TOLERANCE
    return {
        "cross_attention_max_abs_diff": attn_diff,
        "logits_max_abs_diff": logits_diff,
        "row_sum_max_abs_err": row_sum_err,
        "padded_source_max_weight": pad_weight,
        "tolerance": ATTENTION_TOLERANCE,
        "ok": bool(ok and pad_weight <= ATTENTION_TOLERANCE),
    }
