"""The v2 decoder (export/graphs/v2.py): a fused step over an in-place cache, checked against PyTorch and
for bitwise batch invariance, in float32 and int8; the fp16 (CUDA) graph's structure."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from attnserve.export.checks.invariance import InPlaceSteps, batch_invariance
from attnserve.export.checks.steps import StepRunner, encode_alone, v2_session
from attnserve.export.graphs.v2 import (
    DISABLED_OPTIMIZERS,
    decoder_v2_model,
    write_decoder_v2,
)
from attnserve.export.pipeline.v2 import optimized_node_count


@pytest.fixture(scope="module")
def tiny_model(tiny_run_dir):
    from attnserve.training.run import load_model

    return load_model(tiny_run_dir)


@pytest.fixture(scope="module")
def v2_graphs(tiny_model, tiny_bundle_dir, tmp_path_factory):
    """The tiny model's v2 decoder in float32 and int8 (scales calibrated on 60 training pairs)."""
    from tokenizers import Tokenizer

    from attnserve.export.graphs.variants import quantize_int8
    from attnserve.export.pipeline.calibration import calibrated_amax_v2, training_pairs

    out = tmp_path_factory.mktemp("v2")
    cfg = tiny_model.cfg.to_dict()
    state = {k: v.detach().numpy() for k, v in tiny_model.state_dict().items()}
    write_decoder_v2(cfg, state, out / "decoder.v2.onnx")
    toks = [Tokenizer.from_file(str(tiny_bundle_dir / f)) for f in ("src_tokenizer.json", "tgt_tokenizer.json")]
    pairs = training_pairs("cmudict", False, 60)
    amax = calibrated_amax_v2(tiny_bundle_dir / "encoder.onnx", out / "decoder.v2.onnx", *toks, cfg, pairs)
    quantize_int8(out / "decoder.v2.onnx", out / "decoder.v2.int8.onnx", exact_attention=False, activation_amax=amax)
    return out


def _sources(bundle_dir, n):
    return json.loads((bundle_dir / "parity_corpus.json").read_text())["source_ids"][:n]


def test_v2_step_over_in_place_cache_matches_pytorch(tiny_model, tiny_bundle_dir, v2_graphs):
    """Teacher-forced one step at a time through the in-place cache, against PyTorch's full forward."""
    import torch

    cfg = tiny_model.cfg
    enc, dec = v2_session(tiny_bundle_dir / "encoder.onnx"), v2_session(v2_graphs / "decoder.v2.onnx")
    worst = 0.0
    for ids in _sources(tiny_bundle_dir, 8):
        runner = StepRunner(dec, cfg.n_decoder_layers, 1, cfg.max_target_len)
        runner.set_cross(*encode_alone(enc, ids, cfg.n_decoder_layers))
        target = [cfg.bos_id, *np.random.default_rng(len(ids)).integers(4, cfg.tgt_vocab_size, 7).tolist()]
        with torch.no_grad():
            src = torch.tensor([ids])
            want = tiny_model(src, torch.ones_like(src), torch.tensor([target]), torch.ones(1, len(target), dtype=torch.long))
        for p, token in enumerate(target):
            got = runner.step(np.array([token]), np.array([p]))[0][0]
            worst = max(worst, float(np.abs(got - want[0, p].numpy()).max()))
    assert worst < 1e-4


def test_v2_graph_is_fused_after_optimisation(tiny_model, v2_graphs):
    """One GroupQueryAttention and one MultiHeadAttention per layer, the QKV projection one MatMulIntegerToFloat,
    Add + LayerNormalization kept (no SkipLayerNormalization), the in-graph argmax kept."""
    n = tiny_model.cfg.n_decoder_layers
    counts = optimized_node_count(v2_graphs / "decoder.v2.int8.onnx")
    assert counts["GroupQueryAttention"] == n and counts["MultiHeadAttention"] == n
    assert "SkipLayerNormalization" not in counts and counts["LayerNormalization"] == 3 * n + 1
    # QKV, out, cross Q, cross out, FFN up and down per layer, then the logits: 6n + 1 int8 products
    assert counts["MatMulIntegerToFloat"] == 6 * n + 1 and "MatMul" not in counts
    assert counts["ArgMax"] == 1
    assert counts["total"] < 25 * n + 10


@pytest.mark.parametrize("graph", ["decoder.v2.onnx", "decoder.v2.int8.onnx"])
def test_v2_rows_are_bitwise_the_same_alone_and_in_a_batch_of_32(tiny_bundle_dir, v2_graphs, graph):
    """Sources padded to a multiple of 4 (alone) or to the batch's longest, garbage in padded keys and in the
    cache past each row's length, rows joining at different steps: every logit and cache entry identical."""
    encoder = "encoder.int8.onnx" if "int8" in graph else "encoder.onnx"
    cfg = json.loads((tiny_bundle_dir / "bundle.json").read_text())["config"]
    steps = InPlaceSteps(
        tiny_bundle_dir / encoder, v2_graphs / graph, cfg["n_decoder_layers"], cfg["max_target_len"], cfg["tgt_vocab_size"]
    )
    r = batch_invariance(steps, _sources(tiny_bundle_dir, 64))
    assert r["rows"] == 64 and r["max_abs_diff"] == 0.0, r


def test_v2_graph_from_a_bundles_own_weights_equals_the_runs(tiny_model, tiny_bundle_dir):
    """The bundle's fp32 graphs read back (training/weights.py) give the same v2 graph as the run's state_dict."""
    from attnserve.training.weights import load_bundle_weights

    config, state = load_bundle_weights(tiny_bundle_dir)
    from_bundle = decoder_v2_model(config, state)
    from_run = decoder_v2_model(tiny_model.cfg.to_dict(), {k: v.detach().numpy() for k, v in tiny_model.state_dict().items()})
    a = {t.name: onnx.numpy_helper.to_array(t) for t in from_bundle.graph.initializer}
    b = {t.name: onnx.numpy_helper.to_array(t) for t in from_run.graph.initializer}
    assert a.keys() == b.keys()
    assert max(float(np.abs(a[k] - b[k]).max(initial=0.0)) for k in a) == 0.0


def test_fp16_v2_graph_keeps_its_cache_in_float16_and_logits_in_float32(v2_graphs, tmp_path):
    """The CUDA variant's structure (no GPU here): attention and cache in float16, the boundary that carries the
    bias and logits float32, the integer inputs untouched; its float32 twin is the graph tested above."""
    from attnserve.export.graphs.variants import convert_fp16

    convert_fp16(v2_graphs / "decoder.v2.onnx", tmp_path / "decoder.v2.fp16.onnx")
    m = onnx.load(str(tmp_path / "decoder.v2.fp16.onnx"))
    types = {v.name: v.type.tensor_type.elem_type for v in [*m.graph.input, *m.graph.output]}
    f16, f32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    assert all(t == f16 for name, t in types.items() if name.startswith(("past_key_values.", "present.")))
    assert types["logits"] == f32 and types["encoder_attention_bias"] == f32
    assert types["past_lengths"] == onnx.TensorProto.INT32 and types["total_sequence_length"] == onnx.TensorProto.INT32
    ops = {n.op_type for n in m.graph.node}
    assert {"GroupQueryAttention", "MultiHeadAttention"} <= ops
    assert DISABLED_OPTIMIZERS == ["SkipLayerNormFusion"]
