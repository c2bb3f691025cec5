"""attnserve-export verify and attnserve-eval on a bundle."""

import json
import shutil
import subprocess
import sys

from attnserve.export.checks.parity import corpus_failures
from attnserve.service.engine.bundle import sha256_file, write_bundle_json


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)


def test_verify_against_the_run_passes(tiny_bundle_dir, tiny_run_dir):
    proc = run_cli("export", "verify", str(tiny_bundle_dir), "--run", str(tiny_run_dir), "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout)
    assert figures["passed"] and figures["reference"].startswith("pytorch")
    assert figures["graphs"]["decoder_present_max_abs_diff"] <= 1e-4
    # beam search (width 4) through ONNX Runtime = the PyTorch reference beam search, on every corpus
    # input alone and on every third inside continuous batches of greedy and sampled rows
    beam = figures["beam"]
    assert beam["inputs"] >= 256 and beam["width"] == 4
    assert beam["mismatches_alone"] == 0 and beam["mismatches_continuous_batching_mixed"] == 0
    assert beam["score_max_abs_diff_alone"] <= 1e-4 and beam["score_max_abs_diff_continuous_batching_mixed"] <= 1e-4


def test_verify_fails_when_outputs_differ_from_the_recorded_reference(tiny_bundle_dir, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, bundle)
    corpus = json.loads((bundle / "parity_corpus.json").read_text())
    corpus["greedy"][3] = corpus["greedy"][3][:-1]  # pretend the reference said something else
    (bundle / "parity_corpus.json").write_text(json.dumps(corpus))
    meta = json.loads((bundle / "bundle.json").read_text())
    meta["files"]["parity_corpus.json"] = sha256_file(bundle / "parity_corpus.json")  # a consistent, wrong bundle
    write_bundle_json(bundle, meta)
    proc = run_cli("export", "verify", str(bundle), "--threads", "1")
    assert proc.returncode == 1
    assert "FAIL: greedy mismatches_one_at_a_time = 1 of" in proc.stderr


def test_trivial_model_or_small_corpus_cannot_pass():
    ok = {"inputs": 256, "mean_output_len": 6.1, "distinct_outputs": 240}
    assert corpus_failures(ok) == []
    assert "too trivial" in corpus_failures({**ok, "mean_output_len": 0.0})[0]
    assert "too trivial" in corpus_failures({**ok, "distinct_outputs": 3})[0]
    assert "200" in corpus_failures({**ok, "inputs": 50})[0]


def test_eval_on_a_bundle_runs_through_onnxruntime(tiny_bundle_dir, tmp_path):
    out = tmp_path / "eval.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from attnserve.training.cli import eval_main; sys.exit(eval_main())",
            str(tiny_bundle_dir),
            "--split",
            "dev",
            "--limit",
            "50",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["source"] == "onnxruntime" and report["provider"] == "CPUExecutionProvider"
    assert report["words"] == 50 and 0.0 <= report["wer"] <= 100.0
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    assert report["variant"] == meta["default_variant"]["cpu"]
