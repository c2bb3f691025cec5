"""The bundle loader refuses a tampered, truncated, missing or mismatched bundle with one line naming it."""

import json
import shutil
import subprocess
import sys

import pytest

from attnserve.service.engine.bundle import BundleError, load_bundle, write_bundle_json


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
    write_bundle_json(bundle_dir, meta)
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
    write_bundle_json(bundle_copy, meta)
    assert fp16 in refused(bundle_copy)


def test_missing_config_field_is_refused(bundle_copy):
    meta = json.loads((bundle_copy / "bundle.json").read_text())
    del meta["config"]["n_heads"]
    write_bundle_json(bundle_copy, meta)
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
    proc = subprocess.run([sys.executable, "-m", "attnserve.export", "verify", str(bundle_copy)], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "encoder.onnx" in lines[0]


def test_edited_manifest_stops_start_up_with_one_line_naming_it(bundle_copy):
    """bundle.json carries the hash of its own content (manifest_sha256): an edit by hand, here the end token
    moved from its id, is refused at start-up by attnserve-serve in one line naming bundle.json."""
    from attnserve.service.engine.bundle import MANIFEST_FIELD, manifest_sha256

    path = bundle_copy / "bundle.json"
    meta = json.loads(path.read_text())
    assert meta[MANIFEST_FIELD] == manifest_sha256(meta)  # written by attnserve-export build
    meta["special_ids"]["eos"] += 3
    path.write_text(json.dumps(meta, indent=2) + "\n")
    msg = refused(bundle_copy)
    assert str(path) in msg and MANIFEST_FIELD in msg
    from service_harness import free_port

    cmd = [sys.executable, "-m", "attnserve.service", str(bundle_copy), "--port", str(free_port()), "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "bundle.json" in lines[0] and MANIFEST_FIELD in lines[0]


def test_manifest_hash_ignores_layout_and_a_bundle_without_it_loads_unchecked(bundle_copy):
    """Re-indenting bundle.json keeps its hash (the content is hashed as canonical JSON); a bundle written before
    the field existed has none and loads unchecked; a malformed hash is refused."""
    from attnserve.service.engine.bundle import MANIFEST_FIELD

    path = bundle_copy / "bundle.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(meta, separators=(",", ":")))
    load_bundle(bundle_copy)
    del meta[MANIFEST_FIELD]
    meta["special_ids"]["eos"] += 3  # unchecked: nothing records what it was
    path.write_text(json.dumps(meta))
    assert load_bundle(bundle_copy).special_ids["eos"] == meta["special_ids"]["eos"]
    path.write_text(json.dumps({**meta, MANIFEST_FIELD: "not-a-hash"}))
    assert "64 lower-case hex" in refused(bundle_copy)


def test_every_export_command_writes_the_manifest_hash_through_one_function():
    """The commands that write bundle.json (build, add-lexicon, add-context, add-variant, requantize,
    simplify-encoder, and attnserve-eval --record) go through write_bundle_json: no other code writes the file."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    writers = []
    for package in ("export", "training", "service"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text()
            if re.search(r"(bundle\.json|BUNDLE_JSON|bundle_json|manifest)\S*\)?\.write_(text|bytes)\(", text):
                writers.append(str(path.relative_to(root)))
    assert writers == ["service/engine/bundle.py"], writers
