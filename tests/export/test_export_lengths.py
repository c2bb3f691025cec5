"""A model's own length limit at export: a character model whose parity corpus holds sources exactly at,
one and two under, and (truncated to) over `max_source_len` exports, serves them, and a failed build leaves
nothing behind and says where it failed in one line.

The model reads number words below 1,000 (3 to 31 characters) with `max_source_len` 28, so the dev split alone
gives sources of 26, 27, 28 and 29-31 characters; the encoder comparisons of the build pad batches
(export/pipeline/simplify_encoder.py), which must stop at the model's position table.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnserve.training.examples import number_pairs

MAX_SOURCE_LEN = 28


@pytest.fixture(scope="module")
def tight_run(tmp_path_factory) -> Path:
    """A tiny character-level run on number words, `max_source_len` inside the sources' own range."""
    tmp = tmp_path_factory.mktemp("tight")
    data = tmp / "hundreds.tsv"
    data.write_text("".join(f"{words}\t{digits}\n" for words, digits in number_pairs(n=1000, below=1000)))
    out = tmp / "run"
    settings = ["task=seq2seq", "tgt_tokenizer=char", f"dataset={data}", f"max_source_len={MAX_SOURCE_LEN}"]
    settings += ["max_target_len=8", "max_steps=200", "eval_every=200", "checkpoint_every=200", "eval_limit=50", "threads=1"]
    settings += ["drop_too_long=true"]  # the sources longer than the limit are left out on purpose (--allow-drop)
    cmd = [sys.executable, "-m", "attnserve.training", "--preset", "tiny", "--out", str(out)]
    for item in settings:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def tight_bundle(tight_run, tmp_path_factory) -> Path:
    """The bundle `attnserve-export build --no-fp16` makes of `tight_run`."""
    from attnserve.export.pipeline.build import build

    out = tmp_path_factory.mktemp("tight_bundle") / "tight"
    build(tight_run, out, model_id="tight", eval_limit=50, parity_limit=256, threads=1, log=lambda _m: None, fp16=False)
    return out


def test_a_char_model_with_sources_at_max_source_len_exports_and_serves_them(tight_bundle):
    import json

    from attnserve.service.client import Generator

    out = tight_bundle
    meta = json.loads((out / "bundle.json").read_text())
    corpus = json.loads((out / meta["parity_corpus"]).read_text())
    lengths = {len(ids) for ids in corpus["source_ids"]}
    assert {MAX_SOURCE_LEN - 2, MAX_SOURCE_LEN - 1, MAX_SOURCE_LEN} <= lengths and max(lengths) == MAX_SOURCE_LEN
    assert any(len(s) > MAX_SOURCE_LEN for s in corpus["sources"])  # over the limit: truncated, as training reads it
    assert meta["parity"]["passed"] and meta["encoder_graph"]["checked"]["padded_to_at_most"] == MAX_SOURCE_LEN
    assert not out.with_name("tight.partial").exists()
    at_limit = next(s for s in corpus["sources"] if len(s) == MAX_SOURCE_LEN)
    with Generator(out, threads=1) as gen:
        assert gen.generate(at_limit).text.isdigit()


def test_a_failed_build_removes_its_partial_directory_and_ends_in_one_line(tight_run, tmp_path, capsys, monkeypatch):
    import attnserve.export.pipeline.build as build_module
    from attnserve.export.cli import main

    def fails(*_args, **_kwargs):
        # A stand-in for a step failing inside ONNX Runtime, the way an out-of-range feed fails there.
        raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : idx=48 must be within [-48,47]\nsecond line")

    monkeypatch.setattr(build_module, "simplify_bundle_encoders", fails)
    argv = ["build", str(tight_run), "--out", str(tmp_path / "b"), "--no-fp16", "--eval-limit", "50"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()  # the build's progress, then its end
    last = err.splitlines()[-1]
    assert "Traceback" not in err and "second line" not in err and last.startswith("error: build failed at "), err[-2000:]
    assert "encoders without their shape plumbing" in last and "INVALID_ARGUMENT" in last and "--keep-partial" in last
    assert not (tmp_path / "b.partial").exists() and not (tmp_path / "b").exists()

    assert main([*argv, "--keep-partial"]) == 2
    assert "kept for inspection" in capsys.readouterr().err.strip().splitlines()[-1]
    assert (tmp_path / "b.partial" / "encoder.onnx").is_file() and not (tmp_path / "b").exists()


def test_gpu_check_serves_a_bundle_of_another_task_its_own_samples(tight_bundle, tmp_path):
    """The serve step of `attnserve-gpu-check --provider cpu` on a number-words bundle: it sends the bundle's own
    samples (GET /samples), which that model reads, where English words would each be a 422."""
    import json
    import os

    out = tmp_path / "report"
    cmd = [
        sys.executable,
        "-m",
        "attnserve.export.gpu_check",
        "--provider",
        "cpu",
        "--bundle",
        str(tight_bundle),
        "--out",
        str(out),
    ]
    cmd += ["--steps", "serve", "--serve-words", "40", "--threads", "1"]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    serve = json.loads((out / "report.json").read_text())["steps"]["serve"]["result"]
    corpus = json.loads((tight_bundle / "parity_corpus.json").read_text())["sources"]
    assert serve["words"] == 40 and serve["inputs_from"] == "GET /samples" and serve["differ_count"] == 0
    assert all(e["word"] in corpus and e["greedy"].isdigit() for e in serve["examples"])
    assert serve["score"]["compared"] == 40  # characters: every answer is generated in the tokens its text reads as
