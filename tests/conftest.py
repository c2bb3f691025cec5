"""Shared fixtures: a tiny trained run and the bundle exported from it, built once per test session.

The model is small (2+2 layers, 64 wide) but trained enough (400 steps) on a CMUdict slice
to be non-trivial (mean output length >= 5, >= 100 distinct outputs), which the
parity suite requires (about 6.4 and 255 here); training takes ~25 s and the export ~25 s on 2 CPUs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnserve.service.engine.bundle import write_bundle_json

TINY_TRAIN_SETTINGS = [
    "dataset=cmudict",
    "train_limit=4000",
    "max_steps=400",
    "eval_every=400",
    "checkpoint_every=400",
    "eval_limit=100",
    "threads=1",
    # fixed, not sized from the data: the shared tiny bundle's bounds (48 input tokens, 48 new tokens) are what
    # the service tests write their limits against
    "max_source_len=48",
    "max_target_len=48",
]


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory) -> Path:
    """A run directory (Contract 1) from `attnserve-train --preset tiny` on 4000 CMUdict words."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    cmd = [sys.executable, "-m", "attnserve.training", "--preset", "tiny", "--out", str(out)]
    for item in TINY_TRAIN_SETTINGS:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"tiny training failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return out


@pytest.fixture(scope="session")
def tiny_bundle_dir(tiny_run_dir, tmp_path_factory) -> Path:
    """A verified model bundle (Contract 2) built by `attnserve-export build` from `tiny_run_dir`.

    Treat it as read-only: copy it (shutil.copytree) before changing anything in it.
    """
    from attnserve.export.pipeline.build import build

    out = tmp_path_factory.mktemp("tiny_bundle") / "g2p-tiny"
    build(tiny_run_dir, out, model_id="g2p-tiny", eval_limit=200, parity_limit=256, threads=1, log=lambda _msg: None)
    # The int8 gate weighs a speed measurement, so on a busy machine it can go either way; tests
    # compare served outputs with the fp32 PyTorch reference, so the test bundle always serves
    # fp32 (bundle.json written again with its own hash, manifest_sha256; int8 is tested by name).
    meta_path = out / "bundle.json"
    meta = json.loads(meta_path.read_text())
    meta["int8_gate"]["built_cpu_default"] = meta["default_variant"]["cpu"]  # what the gate chose
    meta["default_variant"] = {**meta["default_variant"], "cpu": "fp32"}
    write_bundle_json(meta_path.parent, meta)
    return out


@pytest.fixture(scope="session")
def tiny_int8_bundle_dir(tiny_bundle_dir, tmp_path_factory) -> Path:
    """The tiny bundle serving int8 on CPU, as the default model does: whatever the server serves by
    default must pass the service's promises too (the same answer whatever else is in the batch)."""
    out = tmp_path_factory.mktemp("tiny_int8_bundle") / "g2p-tiny-int8"
    shutil.copytree(tiny_bundle_dir, out)
    meta_path = out / "bundle.json"
    meta = json.loads(meta_path.read_text())
    meta["default_variant"] = {**meta["default_variant"], "cpu": "int8"}
    write_bundle_json(meta_path.parent, meta)
    return out


@pytest.fixture(scope="session")
def tiny_bundle_as_exported(tiny_run_dir, tiny_bundle_dir, tmp_path_factory) -> Path:
    """The tiny bundle with its encoders as the exporter writes them, shape plumbing and all, before `build`
    rewrites them (export/pipeline/simplify_encoder.py): what the rewrite's own tests start from."""
    from attnserve.export.pipeline.build import export_graphs, run_task
    from attnserve.export.pipeline.manifest import write_manifest
    from attnserve.training.run import load_model, load_run_tokenizers

    work = tmp_path_factory.mktemp("tiny_exported_graphs")
    src_tok, tgt_tok = load_run_tokenizers(tiny_run_dir)
    export_graphs(load_model(tiny_run_dir), work, src_tok, tgt_tok, run_task(tiny_run_dir), fp16=True, log=lambda _msg: None)
    out = tmp_path_factory.mktemp("tiny_exported_encoders") / "g2p-tiny"
    shutil.copytree(tiny_bundle_dir, out)
    meta = json.loads((out / "bundle.json").read_text())
    for name in dict.fromkeys(v["encoder"] for v in meta["variants"].values()):
        shutil.copyfile(work / name, out / name)
    del meta["encoder_graph"]
    write_manifest(out, meta)
    return out


@pytest.fixture
def one_torch_thread():
    """Tiny models on a shared 2-core machine: one intra-op thread is fastest and leaves a core free."""
    import torch  # here, not at module level: service tests must run without importing torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
