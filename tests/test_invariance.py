"""Batch invariance at the graph level (export/invariance.py): a row's outputs are bitwise the same
alone and inside a padded batch of 32, for the int8 variant that the default model serves on CPU."""

from __future__ import annotations

import json

from export.invariance import batch_invariance


def _check(bundle_dir, encoder: str, decoder: str, rows: int = 256) -> dict:
    meta = json.loads((bundle_dir / "bundle.json").read_text())
    corpus = json.loads((bundle_dir / meta["parity_corpus"]).read_text())
    cfg = meta["config"]
    return batch_invariance(
        bundle_dir / encoder, bundle_dir / decoder, corpus["source_ids"][:rows], cfg["n_decoder_layers"], cfg["tgt_vocab_size"]
    )


def test_int8_rows_are_bitwise_the_same_alone_and_in_padded_batches(tiny_bundle_dir):
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    figures = _check(tiny_bundle_dir, meta["variants"]["int8"]["encoder"], meta["variants"]["int8"]["decoder"])
    assert figures["rows"] == 256 and figures["max_abs_diff"] == 0.0, figures
    gate = meta["int8_gate"]  # measured at export, the gate's third condition
    assert gate["batch_invariant"] and gate["invariance"]["max_abs_diff"] == 0.0


def test_the_check_catches_per_tensor_dynamic_quantization(tiny_bundle_dir, tmp_path):
    """ONNX Runtime's dynamic quantization scales activations per tensor, so rows leak into each
    other: the check must see it (or its 0.0 above would prove nothing)."""
    import shutil

    from export.variants import quantize_int8_dynamic

    work = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, work)
    for graph in ("encoder", "decoder"):
        quantize_int8_dynamic(work / f"{graph}.onnx", work / f"{graph}.dyn.onnx")
    figures = _check(work, "encoder.dyn.onnx", "decoder.dyn.onnx", rows=64)
    assert figures["encoder_max_abs_diff"] > 1e-4 and figures["decoder_logits_max_abs_diff"] > 1e-4, figures
