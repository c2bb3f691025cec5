"""attnserve-export build: the bundle of Contract 2, with its parity figures and the int8 gate recorded."""

import json

import onnx
import pytest

from attnserve.service.engine.bundle import load_bundle


def test_build_writes_every_contract_field(tiny_bundle_dir):
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    for key in (
        "format_version",
        "model_id",
        "config",
        "special_ids",
        "max_source_len",
        "max_target_len",
        "opset",
        "io",
        "variants",
        "default_variant",
        "parity",
        "eval",
        "files",
    ):
        assert key in meta, key
    assert meta["model_id"] == "g2p-tiny"
    assert meta["special_ids"] == {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
    assert meta["opset"] >= 17
    assert set(meta["variants"]) == {"fp32", "int8", "fp16"}
    assert meta["default_variant"]["cpu"] in ("fp32", "int8")
    for name in ("encoder.onnx", "decoder.onnx", "encoder.int8.onnx", "decoder.v2.int8.onnx", "decoder.v2.fp16.onnx"):
        assert name in meta["files"]
    assert "decoder.int8.onnx" not in meta["files"] and "decoder.fp16.onnx" not in meta["files"]  # v2 replaced them
    assert meta["format_version"] == 2 and "decoder_v2" in meta["io"]
    layouts = {name: v["kv_cache"] for name, v in meta["variants"].items()}
    assert layouts == {"fp32": "concat", "int8": "in_place", "fp16": "in_place"}
    assert "wer" in meta["eval"]["dev"]
    assert "wer" in meta["variants"]["int8"]["eval"]["dev"]
    assert meta["parity"]["passed"] is True
    load_bundle(tiny_bundle_dir)


def test_graphs_have_contract_names_dynamic_axes_and_no_control_flow(tiny_bundle_dir):
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    n = meta["config"]["n_decoder_layers"]
    dec = meta["io"]["decoder"]
    inputs = {i["name"]: i for i in dec["inputs"]}
    assert list(inputs)[:4] == ["input_ids", "position_ids", "decoder_attention_mask", "encoder_attention_bias"]
    for i in range(n):
        for kind in ("decoder", "encoder"):
            for kv in ("key", "value"):
                assert f"past_key_values.{i}.{kind}.{kv}" in inputs
    past = inputs["past_key_values.0.decoder.key"]["shape"]
    assert isinstance(past[0], str) and isinstance(past[2], str)  # B and P symbolic
    outputs = {o["name"]: o for o in dec["outputs"]}
    assert outputs["logits"]["dtype"] == "float32" and len(outputs["logits"]["shape"]) == 2
    assert "next_token" in outputs and meta["decoder_extra_outputs"] == ["next_token"]
    enc_out = [o["name"] for o in meta["io"]["encoder"]["outputs"]]
    assert enc_out[0] == "encoder_attention_bias" and f"present.{n - 1}.encoder.value" in enc_out
    for variant in meta["variants"].values():
        model = onnx.load(str(tiny_bundle_dir / variant["decoder"]))
        assert model.ir_version <= 10
        assert not {node.op_type for node in model.graph.node} & {"If", "Loop", "Scan"}


def test_fp16_variant_keeps_bias_and_logits_float32_at_the_boundary(tiny_bundle_dir):
    """The fp16 variant is the CUDA one, a v2 decoder: its cache float16, the bias and logits float32."""
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    dec = onnx.load(str(tiny_bundle_dir / meta["variants"]["fp16"]["decoder"]))
    types = {v.name: v.type.tensor_type.elem_type for v in [*dec.graph.input, *dec.graph.output]}
    assert types["encoder_attention_bias"] == onnx.TensorProto.FLOAT
    assert types["logits"] == onnx.TensorProto.FLOAT
    assert types["past_key_values.0.decoder.key"] == onnx.TensorProto.FLOAT16
    ops = {node.op_type for node in dec.graph.node}
    assert "LayerNormalization" in ops and {"GroupQueryAttention", "MultiHeadAttention"} <= ops


def test_parity_figures_recorded_at_build(tiny_bundle_dir):
    parity = json.loads((tiny_bundle_dir / "bundle.json").read_text())["parity"]
    assert parity["graphs"]["decoder_logits_max_abs_diff"] <= 1e-4
    assert parity["graphs"]["encoder_max_abs_diff"] <= 1e-4
    assert parity["cached_vs_full"]["cached_vs_pytorch_teacher_forced_max_abs_diff"] <= 1e-4
    g = parity["greedy"]
    assert g["inputs"] >= 200 and g["mean_output_len"] >= 5 and g["distinct_outputs"] >= 100
    assert g["mismatches_one_at_a_time"] == g["mismatches_padded_batches_32"] == g["mismatches_continuous_batching_7"] == 0
    assert parity["sampling"]["mismatches_continuous_batching_5"] == 0
    f16 = parity["fp16"]  # within 1e-2 of the largest |logit| (at least 1): float16 rounds in proportion to its numbers
    assert f16["tolerance"] == pytest.approx(1e-2 * max(1.0, f16["max_abs_logit"]))
    assert f16["ok"] and f16["max_abs_diff_logits_vs_fp32"] <= f16["tolerance"]


def test_int8_gate_is_recorded_and_consistent(tiny_bundle_dir):
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    gate = meta["int8_gate"]
    assert gate["max_loss_points"] == 0.5
    assert set(gate["speedup_vs_fp32"]) == {"batch_1", "batch_32"}
    assert gate["batch_invariant"] and gate["invariance"]["max_abs_diff"] == 0.0
    expected = "int8" if gate["accurate_enough"] and gate["faster"] and gate["batch_invariant"] else "fp32"
    # the fixture pins the test bundle to fp32 and keeps the gate's own choice beside it
    assert gate.get("built_cpu_default", meta["default_variant"]["cpu"]) == expected


def test_build_refuses_bad_arguments_with_one_line(tiny_run_dir, tmp_path, capsys):
    from attnserve.export.cli import main

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("not a bundle")
    cases = [
        (["build", str(tmp_path / "no-run"), "--out", str(tmp_path / "b")], "no checkpoint"),
        (["build", str(tiny_run_dir), "--out", str(tmp_path / "busy")], "not a bundle"),
        (["build", str(tiny_run_dir), "--out", str(tmp_path / "b"), "--parity-limit", "10"], "at least 200"),
        (["build", str(tiny_run_dir), "--out", str(tmp_path / "b"), "--dataset", str(tmp_path / "gone.tsv")], "--dataset"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "not a bundle"  # nothing was overwritten


def test_int8_gate_needs_accuracy_speed_everywhere_and_batch_invariance():
    from attnserve.export.pipeline.int8_gate import int8_decision

    fast = {"fp32": {"batch_1": 100.0, "batch_32": 1000.0}, "int8": {"batch_1": 150.0, "batch_32": 1300.0}}
    slow_at_1 = {"fp32": {"batch_1": 100.0, "batch_32": 1000.0}, "int8": {"batch_1": 95.0, "batch_32": 1300.0}}
    exact, leaky = {"max_abs_diff": 0.0}, {"max_abs_diff": 1e-6}
    ok = int8_decision("g2p", {"wer": 20.0}, {"wer": 20.4}, fast, exact)
    assert ok["accurate_enough"] and ok["faster"] and ok["speedup_vs_fp32"] == {"batch_1": 1.5, "batch_32": 1.3}
    assert ok["batch_invariant"] and ok["invariance"] == exact
    # any difference between a row alone and batched fails it: an int8 rounding step can amplify it
    assert not int8_decision("g2p", {"wer": 20.0}, {"wer": 20.0}, fast, leaky)["batch_invariant"]
    assert not int8_decision("g2p", {"wer": 20.0}, {"wer": 20.0}, fast)["batch_invariant"]  # not measured
    assert not int8_decision("g2p", {"wer": 20.0}, {"wer": 20.6}, fast)["accurate_enough"]
    assert not int8_decision("g2p", {"wer": 20.0}, {"wer": 20.0}, slow_at_1)["faster"]
    # non-G2P tasks gate on exact match, where higher is better
    assert int8_decision("seq2seq", {"exact_match": 80.0}, {"exact_match": 79.6}, fast)["accurate_enough"]
    assert not int8_decision("seq2seq", {"exact_match": 80.0}, {"exact_match": 79.0}, fast)["accurate_enough"]


def test_decoder_and_explain_graph_share_one_weights_file(tiny_bundle_dir):
    from attnserve.export.graphs.format import external_data_files

    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    assert "decoder.onnx.data" in meta["files"]  # hashed and verified like every graph
    for graph in ("decoder.onnx", "decoder.explain.onnx"):
        assert external_data_files(tiny_bundle_dir / graph) == ["decoder.onnx.data"]
    # on disk the two graphs cost one decoder's weights, not two
    self_contained = len(onnx.load(str(tiny_bundle_dir / "decoder.onnx")).SerializeToString())
    on_disk = sum((tiny_bundle_dir / f).stat().st_size for f in ("decoder.onnx", "decoder.explain.onnx", "decoder.onnx.data"))
    assert on_disk < 1.25 * self_contained
    shared = meta["shared_weights"]["decoder.onnx.data"]
    assert shared["graphs"] == ["decoder.onnx", "decoder.explain.onnx"]
    assert shared["references"] == 2 * shared["tensors"] > 0


def test_share_initializers_matches_weights_by_value_not_name(tmp_path):
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from attnserve.export.graphs.v1 import share_initializers

    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    paths = []
    for name, weight_name in (("a.onnx", "w_one"), ("b.onnx", "w_two")):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", weight_name], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
            [numpy_helper.from_array(w, weight_name)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        onnx.save(model, str(tmp_path / name))
        paths.append(tmp_path / name)
    figures = share_initializers(paths, tmp_path / "shared.data")
    assert figures["tensors"] == 1 and figures["references"] == 2
    assert figures["bytes"] == w.nbytes
    x = np.ones((1, 64), np.float32)
    for path in paths:
        assert path.stat().st_size < 1000  # the weight left the graph file
        y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(y, x @ w, rtol=1e-5)


def test_build_without_fp16_leaves_it_out_and_records_why(tiny_run_dir, tmp_path):
    from attnserve.export.pipeline.build import build

    out = tmp_path / "no-fp16"
    meta = build(tiny_run_dir, out, eval_limit=50, parity_limit=200, threads=1, log=lambda _msg: None, fp16=False)
    assert set(meta["variants"]) == {"fp32", "int8"}
    assert "fp16" in meta["omitted_variants"]
    assert meta["default_variant"]["cuda"] == "fp32"
    assert not list(out.glob("*fp16*"))
    assert load_bundle(out).variants.keys() == {"fp32", "int8"}


def test_built_bundle_declares_word_level_source_and_add_lexicon_ships_the_dictionary(tiny_bundle_dir, tmp_path):
    import shutil

    from attnserve.export.cli import main
    from attnserve.service.text.lexicon import Lexicon
    from attnserve.training.data import cmudict_path, parse_cmudict

    assert load_bundle(tiny_bundle_dir).word_level_source is True  # a G2P run: one word per source
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, copy)
    assert main(["add-lexicon", str(copy)]) == 0  # what `build --lexicon` writes, added after the fact
    bundle = load_bundle(copy)
    assert bundle.meta["lexicon"]["dataset"] == "cmudict" and bundle.meta["lexicon"]["file"] in bundle.meta["files"]
    cmudict = parse_cmudict(cmudict_path())
    lexicon = Lexicon.load(bundle)
    field = bundle.meta["lexicon"]
    assert field["targets"] + field["dropped"] == sum(len(p) for p in cmudict.values())  # every pronunciation
    assert [a.text for a in lexicon.lookup("hello")] == cmudict["hello"]


def test_requantize_rewrites_a_bundles_int8_from_its_fp32_graphs(tiny_bundle_dir, tmp_path, capsys):
    """A bundle whose int8 is ONNX Runtime's dynamic quantization (as bundles built before were)
    gets the batch-invariant int8 and a re-run gate, without its run directory."""
    import shutil

    from attnserve.export.cli import main
    from attnserve.export.graphs.variants import DYNAMIC_QUANTIZATION, quantize_int8_dynamic
    from attnserve.export.pipeline.manifest import write_manifest
    from attnserve.export.pipeline.v2 import V2_INT8_QUANTIZATION
    from attnserve.service.engine.bundle import load_bundle

    bundle = tmp_path / "old"
    shutil.copytree(tiny_bundle_dir, bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    for graph in ("encoder", "decoder"):
        quantize_int8_dynamic(bundle / f"{graph}.onnx", bundle / f"{graph}.int8.onnx")
    # a v1 bundle, as built before contract v2: int8 and fp32 only, no v2 decoder
    (bundle / meta["variants"]["int8"]["decoder"]).unlink()
    meta["variants"] = {
        "fp32": {"encoder": "encoder.onnx", "decoder": "decoder.onnx"},
        "int8": {"encoder": "encoder.int8.onnx", "decoder": "decoder.int8.onnx", "quantization": DYNAMIC_QUANTIZATION},
    }
    meta.update(format_version=1, default_variant={"cpu": "fp32", "cuda": "fp32"})
    del meta["io"]["decoder_v2"]
    del meta["int8_gate"]["batch_invariant"]
    write_manifest(bundle, meta)

    assert main(["requantize", str(bundle), "--eval-limit", "100", "--threads", "1"]) == 0
    capsys.readouterr()
    meta = load_bundle(bundle).meta  # every hash verifies
    assert meta["format_version"] == 2 and meta["variants"]["int8"]["kv_cache"] == "in_place"
    assert meta["variants"]["int8"]["decoder"] == "decoder.v2.int8.onnx" and not (bundle / "decoder.int8.onnx").exists()
    assert meta["parity"]["v2_int8"]["greedy_alone_vs_continuous_batching_differ"] == 0
    assert meta["variants"]["int8"]["quantization"] == V2_INT8_QUANTIZATION
    assert meta["variants"]["int8"]["calibration"]["split"] == "train"
    assert meta["variants"]["int8"]["calibration"]["pairs"] > 0
    gate = meta["int8_gate"]
    assert gate["batch_invariant"] and gate["invariance"]["max_abs_diff"] == 0.0
    assert meta["variants"]["int8"]["eval"]["dev"]["words"] == 100
    for graph in ("encoder", "decoder"):  # fixed scales: every activation scale a constant, no per-row range
        g = onnx.load(str(bundle / meta["variants"]["int8"][graph])).graph
        constants = {t.name for t in g.initializer}
        matmuls = [n for n in g.node if n.op_type == "MatMulIntegerToFloat"]
        assert matmuls and all(n.input[2] in constants for n in matmuls)
        assert not any(n.op_type == "Abs" for n in g.node)
    expected = "int8" if gate["accurate_enough"] and gate["faster"] else "fp32"
    assert meta["default_variant"]["cpu"] == expected
    assert not (tmp_path / "old.partial").exists()


def test_requantize_without_its_training_data_stops_with_one_line_and_leaves_nothing(tiny_bundle_dir, tmp_path, capsys):
    """The int8 scales are calibrated on training pairs: a dataset that is not there is refused before any work."""
    import shutil

    from attnserve.export.cli import main

    bundle = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, bundle)
    int8 = json.loads((bundle / "bundle.json").read_text())["variants"]["int8"]["decoder"]
    before = (bundle / int8).read_bytes()
    assert main(["requantize", str(bundle), "--dataset", str(tmp_path / "missing.tsv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: data file not found: {tmp_path / 'missing.tsv'}"]
    assert not (tmp_path / "b.partial").exists() and (bundle / int8).read_bytes() == before


def test_build_leaves_its_encoders_without_shape_plumbing(tiny_bundle_dir, tiny_bundle_as_exported):
    """`build` rewrites every encoder as `simplify-encoder --fused-attention` does, records it, and its parity
    suite (which passed) ran on the rewritten graphs."""
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    record = meta["encoder_graph"]
    for name in dict.fromkeys(v["encoder"] for v in meta["variants"].values()):
        built = onnx.load(str(tiny_bundle_dir / name), load_external_data=False)
        exported = onnx.load(str(tiny_bundle_as_exported / name), load_external_data=False)
        assert len(built.graph.node) < 0.6 * len(exported.graph.node), name
        assert record["files"][name]["nodes_before"] == len(exported.graph.node), name
        assert not [n for n in built.graph.node if n.op_type == "Shape" and not n.attribute], name
    int8 = record["fused_attention"]["encoder.int8.onnx"]
    attention = {"MultiHeadAttention", "QAttention"}  # QAttention: the same, its Q, K, V projections fused in
    fused = [n for n in onnx.load(str(tiny_bundle_dir / "encoder.int8.onnx")).graph.node if n.op_type in attention]
    assert bool(fused) == int8["applied"] == (int8["greedy_agreement_pct"]["int8"] >= 99.9)
    assert record["fused_attention"]["encoder.onnx"]["applied"] is False  # the standard-operators fallback stays so
    assert meta["parity"]["passed"] is True
