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


def test_fused_projections_give_bitwise_the_unfused_outputs(tiny_bundle_dir, tmp_path):
    """The int8 pass fuses MatMuls that read the same activation (Q/K/V, the encoder's cross K/V)
    into one integer MatMul split after: fewer nodes and kernels, and, integer accumulation being
    exact with per-column scales, every output bitwise what the unfused graph gives."""
    import numpy as np
    import onnx

    from export.invariance import cpu_session
    from export.variants import quantize_int8

    dims = {"B": 3, "S": 5, "P": 4, "T": 1}
    rng = np.random.default_rng(0)
    for graph in ("encoder", "decoder"):
        fused, unfused = tmp_path / f"{graph}.fused.onnx", tmp_path / f"{graph}.unfused.onnx"
        counts = quantize_int8(tiny_bundle_dir / f"{graph}.onnx", fused)
        plain = quantize_int8(tiny_bundle_dir / f"{graph}.onnx", unfused, fuse_shared_input=False)
        assert counts["integer_matmuls"] < plain["integer_matmuls"] == counts["matmuls"], (counts, plain)
        assert counts["nodes"] < plain["nodes"]
        ops = [n.op_type for n in onnx.load(str(fused)).graph.node]
        assert ops.count("MatMulIntegerToFloat") == counts["integer_matmuls"]
        a, b = cpu_session(fused), cpu_session(unfused)
        feeds = {}
        for i in a.get_inputs():
            shape = [d if isinstance(d, int) else dims.get(d, dims["P"] if "past" in i.name else dims["S"]) for d in i.shape]
            if i.name == "input_ids":
                feeds[i.name] = rng.integers(4, 20, shape).astype(np.int64)
            elif i.type == "tensor(int64)":
                feeds[i.name] = np.ones(shape, np.int64)
            else:
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        if "position_ids" in feeds:
            feeds["position_ids"][:] = dims["P"]
        if "decoder_attention_mask" in feeds:
            feeds["decoder_attention_mask"] = np.ones((dims["B"], dims["P"] + 1), np.int64)
        if "encoder_attention_bias" in feeds:
            feeds["encoder_attention_bias"][:] = 0.0
        for x, y in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            assert np.array_equal(x, y), graph
