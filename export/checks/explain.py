"""decoder.explain.onnx's cross-attention weights against PyTorch's, at one (B, S, past) with rows of different
lengths: every weight within ATTENTION_TOLERANCE, every row summing to 1 (export/pipeline/explain.py writes the graph)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from attnserve.export.graphs.v1 import DecoderGraph, example_inputs
from attnserve.service.engine.names import decoder_io
from attnserve.service.engine.runtime import session_options
from attnserve.training.model import Transformer

ATTENTION_TOLERANCE = 1e-4  # max |ONNX - PyTorch| of any attention weight, and of any row sum - 1


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
