"""The bundle loader refuses a tampered, truncated, missing or mismatched bundle with one line naming it."""

import json
import shutil
import subprocess
import sys

import pytest

from service.engine.bundle import BundleError, load_bundle


@pytest.fixture
def bundle_copy(tiny_bundle_dir, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, dst)
    return dst


def refused(bundle_dir) -> str:
    with pytest.raises(BundleError) as info:
        load_bundle(bundle_dir)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def rewrite(bundle_dir, **changes):
    meta = json.loads((bundle_dir / "bundle.json").read_text())
    meta.update(changes)
    (bundle_dir / "bundle.json").write_text(json.dumps(meta))
    return meta


def test_intact_bundle_loads_with_its_fields(tiny_bundle_dir):
    b = load_bundle(tiny_bundle_dir)
    assert b.model_id == "g2p-tiny"
    assert b.max_source_len > 0 and b.max_target_len > 0
    assert b.special_ids["eos"] == 2
    assert len(b.sha256) == 64
    enc, dec = b.graph_paths("fp32")
    assert enc.name == "encoder.onnx" and dec.is_file()
    assert b.resolve_variant("auto", "cpu") == b.default_variant["cpu"]


def test_corrupted_graph_is_refused_naming_the_file(bundle_copy):
    path = bundle_copy / "decoder.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    path.write_bytes(bytes(data))
    msg = refused(bundle_copy)
    assert "decoder.onnx" in msg and "sha256" in msg


def test_changed_shared_weights_file_is_refused_naming_it(bundle_copy):
    path = bundle_copy / "decoder.onnx.data"  # external data of decoder.onnx and decoder.explain.onnx
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    msg = refused(bundle_copy)
    assert "decoder.onnx.data" in msg and "sha256" in msg


def test_truncated_tokenizer_is_refused(bundle_copy):
    path = bundle_copy / "tgt_tokenizer.json"
    path.write_bytes(path.read_bytes()[:100])
    assert "tgt_tokenizer.json" in refused(bundle_copy)


def test_missing_file_is_refused(bundle_copy):
    (bundle_copy / "encoder.int8.onnx").unlink()
    msg = refused(bundle_copy)
    assert "encoder.int8.onnx" in msg and "missing" in msg


def test_unknown_format_version_is_refused(bundle_copy):
    rewrite(bundle_copy, format_version=99)
    assert "format_version" in refused(bundle_copy)


def test_referenced_but_unlisted_file_is_refused(bundle_copy):
    meta = json.loads((bundle_copy / "bundle.json").read_text())
    fp16 = meta["variants"]["fp16"]["decoder"]
    del meta["files"][fp16]
    (bundle_copy / "bundle.json").write_text(json.dumps(meta))
    assert fp16 in refused(bundle_copy)


def test_missing_config_field_is_refused(bundle_copy):
    meta = json.loads((bundle_copy / "bundle.json").read_text())
    del meta["config"]["n_heads"]
    (bundle_copy / "bundle.json").write_text(json.dumps(meta))
    assert "n_heads" in refused(bundle_copy)


def test_default_variant_must_exist(bundle_copy):
    rewrite(bundle_copy, default_variant={"cpu": "int4", "cuda": "fp32"})
    assert "int4" in refused(bundle_copy)


def test_broken_manifest_and_missing_dir_are_refused(bundle_copy, tmp_path):
    (bundle_copy / "bundle.json").write_text("{not json")
    assert "bundle.json" in refused(bundle_copy)
    assert "not found" in refused(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    assert "bundle.json" in refused(tmp_path / "empty")


def test_unlisted_extra_files_are_ignored(bundle_copy):
    (bundle_copy / "MODEL_CARD.md").write_text("# notes\n")
    load_bundle(bundle_copy)


def test_verify_cli_refuses_tampered_bundle_with_one_line(bundle_copy):
    path = bundle_copy / "encoder.onnx"
    path.write_bytes(path.read_bytes() + b"\0")
    proc = subprocess.run([sys.executable, "-m", "export", "verify", str(bundle_copy)], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "encoder.onnx" in lines[0]
