"""The int8 encoder's Q, K, V projections as one QAttention per layer (export/graphs/encoder_fuse.py) and its per-token
work on the real tokens only (export/graphs/encoder_pack.py), on the tiny bundle's int8 encoder with fused attention:
the fused graph's nodes, every output bitwise the same padded and batched, every real position bitwise the same once
packed, each row the same alone and among rows of other lengths, and `simplify-encoder --fused-attention` writing
and recording both."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from attnserve.export.cli import main as export_main
from attnserve.export.graphs.encoder_attention import fuse_self_attention
from attnserve.export.graphs.encoder_fuse import fuse_qkv_attention
from attnserve.export.graphs.encoder_pack import pack_tokens
from attnserve.export.graphs.encoder_simplify import simplify_encoder
from attnserve.export.pipeline.simplify_encoder import batch_variant_rows, compare_outputs, encoder_feeds, parity_batches
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.runtime import session_options

INT8 = "encoder.int8.onnx"


@pytest.fixture(scope="module")
def attention_graphs(tiny_bundle_as_exported, tmp_path_factory):
    """(config, {"mha": path, "qattention": path, "packed": path}): the int8 encoder with MultiHeadAttention as the
    fused-attention gate leaves it, then with QAttention, then packed."""
    config = json.loads((tiny_bundle_as_exported / "bundle.json").read_text())["config"]
    work = tmp_path_factory.mktemp("encoder_fuse")
    mha = fuse_self_attention(
        simplify_encoder(onnx.load(str(tiny_bundle_as_exported / INT8))),
        config["n_encoder_layers"],
        config["n_heads"],
        config["d_model"],
    )
    fused, count = fuse_qkv_attention(mha)
    assert count == config["n_encoder_layers"]
    packed, _ = pack_tokens(fused, config["d_model"])
    paths = {}
    for name, model in (("mha", mha), ("qattention", fused), ("packed", packed)):
        onnx.checker.check_model(model)
        paths[name] = work / f"{name}.onnx"
        onnx.save(model, str(paths[name]))
    return config, paths


def _ops(path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def test_one_qattention_per_layer_replaces_three_projections_and_the_attention(attention_graphs):
    config, paths = attention_graphs
    layers, before, after = config["n_encoder_layers"], _ops(paths["mha"]), _ops(paths["qattention"])
    assert before["MultiHeadAttention"] == layers and after["MultiHeadAttention"] == 0
    assert after["QAttention"] == layers
    assert after["MatMulIntegerToFloat"] == before["MatMulIntegerToFloat"] - 3 * layers
    assert after["QuantizeLinear"] == before["QuantizeLinear"]  # each layer's input is still quantized once
    assert sum(after.values()) == sum(before.values()) - 3 * layers


def test_qattention_outputs_are_bitwise_the_same_padded_and_batched(tiny_bundle_as_exported, attention_graphs):
    _, paths = attention_graphs
    batches = parity_batches(tiny_bundle_as_exported)
    assert sorted({len(b) for b in batches}) == [1, 4, 32]
    assert compare_outputs(paths["mha"], paths["qattention"], batches) == []


def test_packed_real_positions_are_bitwise_the_same_and_only_padding_differs(tiny_bundle_as_exported, attention_graphs):
    config, paths = attention_graphs
    batches = parity_batches(tiny_bundle_as_exported)
    assert compare_outputs(paths["qattention"], paths["packed"], batches, real_only=True) == []
    # padding positions now hold copies of real tokens' values: the full comparison sees them, so the real-only
    # comparison above is the one that proves something
    assert compare_outputs(paths["qattention"], paths["packed"], [b for b in batches if len(b) == 32][:1]) != []
    ops = _ops(paths["packed"])
    assert ops["NonZero"] == 1 and ops["QAttention"] == config["n_encoder_layers"]
    # per layer one unpack (the attention's quantized input) and one pack (its output); the embedding's pack; one
    # unpack of the last quantized input, the cross K/V projections running on padded rows
    assert ops["Gather"] - _ops(paths["qattention"])["Gather"] == 2 * config["n_encoder_layers"] + 2


def test_a_packed_row_is_bitwise_the_same_alone_and_among_rows_of_other_lengths(tiny_bundle_as_exported, attention_graphs):
    _, paths = attention_graphs
    sources = json.loads((tiny_bundle_as_exported / "parity_corpus.json").read_text())["source_ids"][:64]
    assert len({len(s) for s in sources}) > 3  # mixed lengths, so every batch is padded
    assert batch_variant_rows(paths["packed"], sources, 0) == 0
    session = ort.InferenceSession(str(paths["packed"]), session_options(1), providers=["CPUExecutionProvider"])
    rows = sorted(sources, key=len)[:: max(1, len(sources) // 8)]  # short and long rows, longest last
    batched = session.run(None, encoder_feeds(rows, extra=0))
    for r, row in enumerate(rows):
        alone = session.run(None, encoder_feeds([row], extra=0))
        for a, b in zip(alone[1:], batched[1:]):
            assert np.array_equal(a[0], b[r, :, : len(row)])


def test_the_command_fuses_packs_and_records_then_changes_nothing(tiny_bundle_as_exported, attention_graphs, tmp_path):
    config, paths = attention_graphs
    bundle = tmp_path / "g2p-tiny"
    shutil.copytree(tiny_bundle_as_exported, bundle)
    assert export_main(["simplify-encoder", str(bundle), "--fused-attention"]) == 0
    meta = load_bundle(bundle).meta  # every hash verifies
    record = meta["encoder_graph"]
    if not record["fused_attention"][INT8]["applied"]:
        pytest.skip("the fused-attention gate did not pass on this tiny model: nothing to fuse")
    assert record["fused_projections"][INT8]["qattention"] == config["n_encoder_layers"]
    packed = record["packed_tokens"][INT8]
    assert packed["rows_not_batch_invariant"] == 0 and packed["nodes_after"] == sum(_ops(bundle / INT8).values())
    assert "encoder.onnx" not in record["fused_projections"] and "encoder.onnx" not in record["packed_tokens"]
    assert _ops(bundle / INT8) == _ops(paths["packed"])
    hashes = dict(meta["files"])
    assert export_main(["simplify-encoder", str(bundle), "--fused-attention"]) == 0
    again = load_bundle(bundle).meta
    assert again["files"] == hashes and again["encoder_graph"]["fused_attention"] == record["fused_attention"]
