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

from attnserve.export.checks.explain import attention_parity
from attnserve.export.errors import BuildError
from attnserve.export.graphs.format import graph_io
from attnserve.export.graphs.v1 import export_decoder, share_initializers
from attnserve.export.pipeline.manifest import VARIANT_FILES
from attnserve.service.engine.names import cross_attention_names
from attnserve.training.model import Transformer

SHARED_DECODER_WEIGHTS = "decoder.onnx.data"  # external data of decoder.onnx and decoder.explain.onnx


def add_explain_sharing_weights(model, work: Path, meta: dict, log) -> None:
    """decoder.explain.onnx, its weights moved with decoder.onnx's into one shared file (recorded in `meta`)."""
    log("[export] decoder.explain.onnx (cross-attention outputs for POST /explain)")
    add_explain_graph(model, work, meta, VARIANT_FILES["fp32"]["encoder"])
    shared = share_initializers(
        [work / VARIANT_FILES["fp32"]["decoder"], work / meta["explain"]["decoder"]], work / SHARED_DECODER_WEIGHTS
    )
    meta["shared_weights"] = {
        SHARED_DECODER_WEIGHTS: {"graphs": [VARIANT_FILES["fp32"]["decoder"], meta["explain"]["decoder"]], **shared}
    }
    log(f"[export] {SHARED_DECODER_WEIGHTS}: {shared['tensors']} weights shared by decoder.onnx and decoder.explain.onnx")


EXPLAIN_DECODER = "decoder.explain.onnx"
EXPLAIN_IO_KEY = "decoder.explain"


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
