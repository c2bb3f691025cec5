"""The encoder's self-attention as MultiHeadAttention (export/graphs/encoder_attention.py) on the tiny bundle's
encoders as exported (before `build` rewrites them itself): one node per layer, outputs close to the exported
attention's, each row bitwise the same alone and in a padded batch, and `simplify-encoder --fused-attention`
touching only the encoder that already needs contrib kernels."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from attnserve.export.cli import main as export_main
from attnserve.export.errors import BuildError
from attnserve.export.graphs.encoder_attention import fuse_self_attention
from attnserve.export.pipeline.simplify_encoder import batch_variant_rows, encoder_feeds
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.runtime import session_options


def _config(bundle_dir) -> dict:
    return json.loads((bundle_dir / "bundle.json").read_text())["config"]


def _outputs(model_or_path, feeds) -> list[np.ndarray]:
    source = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return ort.InferenceSession(source, session_options(1), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name,tolerance", [("encoder.onnx", 1e-4), ("encoder.int8.onnx", 0.25)])
def test_one_attention_node_per_layer_close_to_the_exported_graph(tiny_bundle_as_exported, tmp_path, name, tolerance):
    config = _config(tiny_bundle_as_exported)
    fused = fuse_self_attention(
        onnx.load(str(tiny_bundle_as_exported / name)), config["n_encoder_layers"], config["n_heads"], config["d_model"]
    )
    ops = Counter(n.op_type for n in fused.graph.node)
    assert ops["MultiHeadAttention"] == config["n_encoder_layers"]
    assert ops["Softmax"] == ops["Exp"] == 0
    sources = json.loads((tiny_bundle_as_exported / "parity_corpus.json").read_text())["source_ids"][:64]
    feeds = encoder_feeds(sources)
    lengths = [len(s) for s in sources]
    for before, after in zip(_outputs(tiny_bundle_as_exported / name, feeds), _outputs(fused, feeds)):
        for r, n in enumerate(lengths):  # padding positions are never read
            np.testing.assert_allclose(after[r, ..., :n, :], before[r, ..., :n, :], atol=tolerance, rtol=0)
    onnx.save(fused, str(tmp_path / name))
    assert batch_variant_rows(tmp_path / name, sources, 0) == 0


def test_a_graph_without_the_exported_attention_is_refused(tiny_bundle_as_exported):
    config = _config(tiny_bundle_as_exported)
    with pytest.raises(BuildError, match="no self-attention"):
        fuse_self_attention(onnx.load(str(tiny_bundle_as_exported / "encoder.onnx")), config["n_encoder_layers"] + 1, 2, 64)


def test_the_command_fuses_only_the_contrib_kernel_encoder(tiny_bundle_as_exported, tmp_path):
    bundle = tmp_path / "g2p-tiny"
    shutil.copytree(tiny_bundle_as_exported, bundle)
    assert export_main(["simplify-encoder", str(bundle), "--fused-attention"]) == 0
    meta = load_bundle(bundle).meta  # every hash still matches
    gates = meta["encoder_graph"]["fused_attention"]
    assert gates["encoder.onnx"]["applied"] is False
    assert not any(n.domain for n in onnx.load(str(bundle / "encoder.onnx")).graph.node)
    int8 = gates["encoder.int8.onnx"]
    assert int8["rows_not_batch_invariant"] == 0 and set(int8["greedy_agreement_pct"]) == {"int8"}
    attention = {"MultiHeadAttention", "QAttention"}  # QAttention: the same, its Q, K, V projections fused in
    has_mha = any(n.op_type in attention for n in onnx.load(str(bundle / "encoder.int8.onnx")).graph.node)
    assert has_mha == int8["applied"] == (int8["greedy_agreement_pct"]["int8"] >= 99.9)
