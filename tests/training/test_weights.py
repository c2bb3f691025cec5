"""training/weights.py: a bundle's own fp32 graphs give back the PyTorch state_dict they were exported from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from attnserve.service.engine.bundle import write_bundle_json
from attnserve.training.weights import WeightsError, load_bundle_weights


def _graphs(model, out: Path, config: dict) -> Path:
    """encoder.onnx + decoder.onnx of `model` and the bundle.json fields the mapping reads."""
    from attnserve.export.graphs.format import graph_io
    from attnserve.export.graphs.v1 import export_decoder, export_encoder

    out.mkdir(parents=True, exist_ok=True)
    export_encoder(model, out / "encoder.onnx")
    export_decoder(model, out / "decoder.onnx")
    io = {g: graph_io(out / f"{g}.onnx") for g in ("encoder", "decoder")}
    variants = {"fp32": {"encoder": "encoder.onnx", "decoder": "decoder.onnx"}}
    (out / "bundle.json").write_text(json.dumps({"config": config, "io": io, "variants": variants}))
    return out


def _model_from(bundle_dir: Path):
    import torch

    from attnserve.training.config import ModelConfig
    from attnserve.training.model import Transformer

    config, state = load_bundle_weights(bundle_dir)
    model = Transformer(ModelConfig.from_dict(config)).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return model, config


def bundle_step_logits(bundle_dir: Path, steps: int = 4) -> list[np.ndarray]:
    """Encoder, then `steps` cached decoder steps on fixed inputs: each step's logits [B, V]."""
    meta = json.loads((bundle_dir / "bundle.json").read_text())
    cfg = meta["config"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    enc = ort.InferenceSession(str(bundle_dir / "encoder.onnx"), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(bundle_dir / "decoder.onnx"), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    b, s, n, h, dh = 3, 7, cfg["n_decoder_layers"], cfg["n_heads"], cfg["d_model"] // cfg["n_heads"]
    ids = rng.integers(4, cfg["src_vocab_size"], (b, s)).astype(np.int64)
    mask = np.ones((b, s), np.int64)
    mask[1, 5:] = 0
    enc_out = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {"input_ids": ids, "attention_mask": mask})))
    past = {f"past_key_values.{i}.decoder.{kv}": np.zeros((b, h, 0, dh), np.float32) for i in range(n) for kv in ("key", "value")}
    layers_kv = [(i, kv) for i in range(n) for kv in ("key", "value")]
    cross = {f"past_key_values.{i}.encoder.{kv}": enc_out[f"present.{i}.encoder.{kv}"] for i, kv in layers_kv}
    tokens = np.full((b, 1), cfg["bos_id"], np.int64)
    logits = []
    for step in range(steps):
        feed = {
            "input_ids": tokens,
            "position_ids": np.full((b, 1), step, np.int64),
            "decoder_attention_mask": np.ones((b, step + 1), np.int64),
            "encoder_attention_bias": enc_out["encoder_attention_bias"],
            **past,
            **cross,
        }
        out = dict(zip([o.name for o in dec.get_outputs()], dec.run(None, feed)))
        logits.append(out["logits"])
        past = {f"past_key_values.{i}.decoder.{kv}": out[f"present.{i}.decoder.{kv}"] for i, kv in layers_kv}
        tokens = rng.integers(4, cfg["tgt_vocab_size"], (b, 1)).astype(np.int64)
    return logits


def test_bundle_rebuilt_from_its_weights_gives_the_same_logits(tiny_bundle_dir, tmp_path, one_torch_thread):
    model, config = _model_from(tiny_bundle_dir)
    rebuilt = _graphs(model, tmp_path / "rebuilt", config)
    for ours, theirs in zip(bundle_step_logits(rebuilt), bundle_step_logits(tiny_bundle_dir)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "arch",
    [
        dict(norm_placement="post", pos_encoding="learned", tie_embeddings=False, activation="gelu"),
        dict(norm_placement="pre", pos_encoding="sinusoidal", tie_embeddings=True, n_encoder_layers=1, n_decoder_layers=3),
    ],
    ids=["post-learned-untied", "pre-sinusoidal-tied-1+3"],
)
def test_every_architecture_maps_back_to_its_exact_state_dict(arch, tmp_path, one_torch_thread):
    """An untrained model: its LayerNorms are all ones and zeros, which the exporter merges into one
    initializer, so this also proves the mapping reads structure, not names."""
    import torch

    from attnserve.training.config import ModelConfig
    from attnserve.training.model import Transformer

    torch.manual_seed(0)
    base = dict(d_model=32, n_heads=4, d_ff=48, n_encoder_layers=2, n_decoder_layers=2, max_source_len=16, max_target_len=16)
    cfg = ModelConfig(**(base | arch), src_vocab_size=20, tgt_vocab_size=17)
    model = Transformer(cfg).eval()
    bundle = _graphs(model, tmp_path / "b", cfg.to_dict())
    config, state = load_bundle_weights(bundle)
    assert config == cfg.to_dict()
    reference = model.state_dict()
    assert set(state) == set(reference)
    for key, value in reference.items():
        np.testing.assert_array_equal(state[key], value.numpy(), err_msg=key)


def test_a_directory_without_bundle_json_is_one_clear_error(tmp_path):
    with pytest.raises(WeightsError, match="no bundle.json"):
        load_bundle_weights(tmp_path)


def test_a_config_that_does_not_match_the_graphs_is_refused(tiny_bundle_dir, tmp_path):
    import shutil

    copy = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, copy)
    meta = json.loads((copy / "bundle.json").read_text())
    meta["config"]["n_encoder_layers"] += 1
    write_bundle_json(copy, meta)
    with pytest.raises(WeightsError, match="linear layers"):
        load_bundle_weights(copy)
