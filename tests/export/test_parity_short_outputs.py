"""The export's parity proof for a model whose answers are short: number words below 1,000 -> 1-3 digits.

Free-running answers that short cannot show a graph is right (a model saying "7" to everything would
match any graph), so the parity suite compares teacher-forced logits step by step as well, over the
same number of steps whatever the answers' length; only a model whose logits ignore its input fails,
with one line that says what to do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnserve.export.checks.corpus import make_parity_corpus
from attnserve.export.checks.parity import MIN_SOURCE_SPREAD, corpus_failures
from attnserve.training.examples import number_pairs


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """A tiny run on number words below 1,000: every target is 1 to 3 characters (char tokens) long."""
    tmp = tmp_path_factory.mktemp("short")
    data = tmp / "hundreds.tsv"
    data.write_text("".join(f"{words}\t{digits}\n" for words, digits in number_pairs(n=1000, below=1000)))
    out = tmp / "run"
    settings = ["task=seq2seq", "tgt_tokenizer=char", f"dataset={data}", "max_source_len=40", "max_target_len=8"]
    settings += ["max_steps=200", "eval_every=200", "checkpoint_every=200", "eval_limit=50", "threads=1"]
    cmd = [sys.executable, "-m", "attnserve.training", "--preset", "tiny", "--out", str(out)]
    for item in settings:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_bundle_builds_from_a_model_whose_answers_are_one_to_three_tokens(short_run, tmp_path):
    from attnserve.export.pipeline.build import build

    out = tmp_path / "hundreds"
    build(short_run, out, model_id="hundreds", eval_limit=50, parity_limit=256, threads=1, log=lambda _m: None, fp16=False)
    parity = json.loads((out / "bundle.json").read_text())["parity"]
    greedy, forced = parity["greedy"], parity["teacher_forced"]
    assert greedy["mean_output_len"] <= 3.0  # what the old rule (mean length >= 5) refused
    assert forced["inputs"] >= 200 and forced["steps_per_input"] == 8
    assert forced["argmax_mismatches"] == 0 and forced["max_abs_diff_logits"] <= 1e-4
    assert forced["source_spread"] >= MIN_SOURCE_SPREAD
    assert parity["passed"]

    # the bundle alone (no run): the recorded argmax and top logits are the reference
    proc = subprocess.run(
        [sys.executable, "-m", "attnserve.export", "verify", str(out), "--threads", "1"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["teacher_forced"]["compared_with"].startswith("argmax and top logit")


def test_a_model_that_ignores_its_input_cannot_prove_parity_and_says_what_to_do(short_run):
    """Cross-attention silenced: every input gets the same logits, so no comparison of outputs could tell a
    graph that mixed up its inputs from a right one."""
    import torch

    from attnserve.training.run import load_model, load_run_tokenizers

    model = load_model(short_run)
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.cross_attn.out_proj.weight.zero_()
            layer.cross_attn.out_proj.bias.zero_()
    src_tok, _ = load_run_tokenizers(short_run)
    sources = [words for words, _ in number_pairs(n=200, below=1000)]
    corpus = make_parity_corpus(model, src_tok, sources)
    assert corpus["teacher_forced"]["source_spread"] < 1e-5
    greedy = {"inputs": 200, "mean_output_len": 2.0, "distinct_outputs": 1}
    tf = {"inputs": 200, "source_spread": corpus["teacher_forced"]["source_spread"]}
    (failure,) = corpus_failures(greedy, tf)
    assert "\n" not in failure
    assert "cannot be proven" in failure and "ignores what it reads" in failure
    assert "train it longer" in failure and "--dataset FILE.tsv" in failure


def test_short_answers_pass_when_their_logits_follow_the_input():
    short = {"inputs": 256, "mean_output_len": 2.1, "distinct_outputs": 12}
    assert corpus_failures(short, {"inputs": 256, "source_spread": 7.5}) == []
    assert "cannot be proven" in corpus_failures(short, {"inputs": 256, "source_spread": 0.01})[0]
    # a bundle whose corpus has no teacher-forced record: the answers alone decide, and the line says how to fix it
    assert "rebuild the bundle" in corpus_failures(short)[0]
