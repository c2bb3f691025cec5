"""`attnserve-gpu-check --provider cpu` (the CUDA check's dry run) and `attnserve-export add-variant BUNDLE fp16`,
on real ONNX Runtime sessions and a real server on 127.0.0.1. CUDA itself cannot run here (no GPU): the
report's CUDA-only parts are proven by the command on a GPU host (deploy/gpu/device_check.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_passes_on_the_tiny_bundle_and_reports_every_step(tiny_int8_bundle_dir, tmp_path):
    before = (tiny_int8_bundle_dir / "bundle.json").read_text()
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "attnserve.export.gpu_check", "--provider", "cpu", "--bundle", str(tiny_int8_bundle_dir)]
    cmd += ["--out", str(out), "--batches", "1,4", "--lengths", "4,8", "--serve-words", "40", "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and report["failures"] == []
    steps = report["steps"]
    assert list(steps) == ["machine", "variant", "verify", "bench", "serve"]
    assert all(s["ok"] for s in steps.values())
    import onnxruntime

    assert steps["machine"]["result"]["onnxruntime"] == onnxruntime.__version__
    assert "CPUExecutionProvider" in steps["machine"]["result"]["available_providers"]

    variant = steps["variant"]["result"]
    assert variant["default_variant"]["cuda"] == "fp16" and variant["fp16_bytes"] > 0
    assert variant["checks_on_cpu"]["structure"]["cache_dtype"] == ["float16"]
    assert variant["checks_on_cpu"]["fp32_twin"]["failures"] == []

    verify = steps["verify"]["result"]
    for name in ("int8", "fp32"):
        r = verify[name]
        assert r["provider"] == "CPUExecutionProvider"
        # the CPU promise: every answer the same alone, in static batches and in continuous batches
        assert {kind: v["differ"] for kind, v in r["invariance"].items()} == {"greedy": 0, "seeded": 0, "beam4": 0}
        assert r["residency"]["places"]["self_attention_cache"] == ["host"]
    assert verify["fp32"]["greedy_vs_fp32_reference"]["agreement_pct"] == 100.0
    int8 = verify["int8"]
    assert int8["variant"] == "int8" or int8["fallback"]["served"] == "fp32"  # the GPU wheel lacks v2's CPU kernels

    bench = steps["bench"]["result"]
    cells = {(c["backend"], c["batch"], c["output_len"]) for c in bench["results"]}
    assert cells == {(b, n, t) for b in ("ort-int8", "ort-fp32-v1") for n in (1, 4) for t in (4, 8)}
    assert all(c["tokens_per_s"] > 0 and c["ms_per_step"] > 0 for c in bench["results"])

    serve = steps["serve"]["result"]
    assert serve["info"]["provider"] == "CPUExecutionProvider" and serve["info"]["variant"] == "int8"
    assert serve["requests_each_way"] == 80 and serve["differ"] == [] and serve["differ_count"] == 0
    # beam 4, /score and the OpenAI route over the same server: on the CPU every n-best list the same in company,
    # and a greedy answer's score equal to the log-probabilities its generation reported
    assert serve["beam4"]["words"] == 40 and serve["beam4"]["differ_count"] == 0
    assert serve["score"]["words"] == 40 and serve["score"]["max_gap_vs_generation"] <= 1e-4
    # compared where the answer was generated in the tokens its text reads as: nearly all (a tiny model may write
    # a word's text in other tokens)
    score = serve["score"]
    assert score["compared"] + score["generated_in_other_tokens"] == 40 and score["compared"] >= 36, score
    assert serve["score"]["max_gap_concurrent_vs_alone"] <= 1e-4
    assert serve["chat"]["same_as_generate"] is True

    md = (out / "report.md").read_text()
    assert md.startswith("# attnserve-gpu-check: PASSED") and "| bench | yes |" in md
    assert "beam 4 over 40 of them" in md and "/v1/chat/completions for" in md
    assert (tiny_int8_bundle_dir / "bundle.json").read_text() == before  # the check works on a copy


def test_gpu_check_records_a_failed_step_and_exits_non_zero(tiny_bundle_dir, tmp_path):
    """A step that fails (here: CUDA asked for on a machine without it) is recorded; the other steps still run."""
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "attnserve.export.gpu_check", "--provider", "cuda", "--bundle", str(tiny_bundle_dir)]
    cmd += ["--out", str(out), "--steps", "machine,variant", "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert not report["steps"]["machine"]["ok"] and report["steps"]["variant"]["ok"]
    assert any("CUDA" in f or "NVIDIA" in f for f in report["failures"])
    assert "FAILED" in (out / "report.md").read_text().splitlines()[0]


def test_add_variant_writes_fp16_v2_into_a_copy_of_the_default_bundle(tmp_path):
    from attnserve.export.pipeline.add_variant import FILES, add_variant
    from attnserve.service.engine.bundle import load_bundle

    bundle = tmp_path / "g2p-en"
    shutil.copytree(ROOT / "models" / "g2p-en", bundle)
    lines: list[str] = []
    meta = add_variant(bundle, "fp16", provider="cpu", threads=1, log=lines.append)
    loaded = load_bundle(bundle)  # every hash updated
    assert loaded.default_variant == {"cpu": "int8", "cuda": "fp16"}
    fp16 = loaded.variants["fp16"]
    assert fp16["kv_cache"] == "in_place" and fp16["fallback"] == "fp32"
    assert {fp16["decoder"]} == set(FILES.values()) <= set(meta["files"])
    assert fp16["encoder"] == loaded.variants["fp32"]["encoder"]  # shared: one copy of the encoder's weights
    assert not (bundle / "encoder.fp16.onnx").exists()
    assert "fp32-v2" not in loaded.variants and not (bundle / "decoder.v2.onnx").exists()
    checks = meta["parity"]["fp16"]
    assert checks["structure"]["ok"] and checks["structure"]["GroupQueryAttention"] == 3
    assert checks["fp32_twin"]["greedy_agreement_with_reference_pct"] == 100.0
    assert checks["fp16_greedy_on_cpu"]["agreement_pct"] >= 99.0 and checks["fp16_greedy_on_cpu"]["failures"] == []
    assert checks["cuda"] == {"proven": False, "reason": "no GPU here"}
    assert lines[-1].startswith("[add-variant] CUDA parity is still to be proven")


def test_add_variant_and_the_check_import_no_torch():
    modules = "attnserve.export.pipeline.add_variant, attnserve.export.gpu_check.cli, attnserve.export.bench"
    code = f"import sys, {modules}; sys.exit('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, timeout=120).returncode == 0


def test_add_variant_refuses_an_unknown_variant(tiny_bundle_dir):
    import pytest

    from attnserve.export.errors import BuildError
    from attnserve.export.pipeline.add_variant import add_variant

    with pytest.raises(BuildError, match="knows only 'fp16'"):
        add_variant(tiny_bundle_dir, "bf16", provider="cpu")
