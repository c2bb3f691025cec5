"""Subword targets that learn, or a warning: `bpe_vocab_size: auto` sizes the vocabulary from the data;
a bpe target vocabulary nearly as large as the set of targets, and a run whose dev exact match is still
0 after the warm-up, are both named on stderr."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from attnserve.training.config import ConfigError, TrainConfig
from attnserve.training.data import load_examples
from attnserve.training.tokenize import AUTO_MIN_TOKENS, auto_bpe_vocab_size, bpe_target_warning, build_tokenizer
from attnserve.training.train import nothing_learned_warning


@pytest.fixture(scope="module")
def number_targets() -> list[str]:
    return [t for e in load_examples("numbers", "train") for t in e.targets]


def mean_tokens(tok, texts: list[str]) -> float:
    return sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts) / len(texts)


def test_auto_keeps_short_answers_several_tokens_long(number_targets):
    tok = build_tokenizer(number_targets, "bpe", vocab_size="auto")
    assert mean_tokens(tok, number_targets) >= AUTO_MIN_TOKENS
    assert tok.get_vocab_size() <= len(set(number_targets)) // 4
    assert bpe_target_warning(tok.get_vocab_size(), len(set(number_targets)), "auto") is None
    # what a fixed 8,000 did: about one token per answer
    fixed = build_tokenizer(number_targets, "bpe", vocab_size=8000)
    assert mean_tokens(fixed, number_targets) < 2 and fixed.get_vocab_size() > len(set(number_targets)) / 2


def test_auto_gives_long_texts_the_full_vocabulary():
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    sentences = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(6000)]
    assert auto_bpe_vocab_size(sentences) == len(set(sentences)) // 4  # capped by the distinct texts, each still many tokens


def test_bpe_vocab_size_is_auto_by_default_and_a_number_set_is_kept(number_targets):
    assert TrainConfig().bpe_vocab_size == "auto"
    assert TrainConfig().with_overrides(["bpe_vocab_size=40"]).bpe_vocab_size == 40
    assert TrainConfig.from_dict({"bpe_vocab_size": "AUTO"}).bpe_vocab_size == "auto"
    assert build_tokenizer(number_targets, "bpe", vocab_size=40).get_vocab_size() == 40
    for bad in ("0", "-3", "lots", "2.5"):
        with pytest.raises(ConfigError, match="bpe_vocab_size must be 'auto' or a positive whole number"):
            TrainConfig().with_overrides([f"bpe_vocab_size={bad}"])


def test_a_run_that_cannot_learn_its_targets_warns_at_the_start_and_after_the_warm_up(tmp_path):
    """The issue's run in small: number words -> digits with bpe_vocab_size=8000, one token per answer."""
    sets = ["dataset=numbers", "task=seq2seq", "tgt_tokenizer=bpe", "bpe_vocab_size=8000", "max_source_len=64"]
    sets += ["max_steps=30", "warmup_steps=10", "eval_every=20", "checkpoint_every=30", "eval_limit=20", "threads=1"]
    cmd = [sys.executable, "-m", "attnserve.training", "--preset", "tiny", "--out", str(tmp_path / "run")]
    proc = subprocess.run([*cmd, *(x for s in sets for x in ("--set", s))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    start = next(w for w in warnings if "bpe target vocabulary" in w)
    assert "bpe_vocab_size=8000" in start and "bpe_vocab_size=auto" in start and "closed set of labels" in start
    evaluations = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert evaluations[0]["step"] == 20 and evaluations[0]["exact_match"] == 0
    (after,) = [w for w in warnings if "dev exact match is 0" in w]  # once: the first evaluation after the warm-up
    assert "at step 20" in after and "bpe_vocab_size=8000" in after and "max_steps=30" in after


def test_the_zero_exact_match_warning_names_likely_causes_and_stays_quiet_otherwise():
    cfg = TrainConfig(task="seq2seq", tgt_tokenizer="char", dataset="pairs.tsv", lr=0.5)
    warning = nothing_learned_warning(cfg, {"step": 200, "exact_match": 0.0, "token_accuracy": 3.0})
    assert "lr=0.5" in warning and "max_target_len" in warning and "dataset=pairs.tsv" in warning
    assert "bpe" not in warning  # not a cause for a char tokenizer
    assert nothing_learned_warning(cfg, {"step": 200, "exact_match": 0.7}) is None
    assert nothing_learned_warning(TrainConfig(), {"step": 200, "wer": 100.0, "per": 80.0}) is not None  # G2P: no word right
    assert nothing_learned_warning(TrainConfig(), {"step": 200, "wer": 99.5, "per": 80.0}) is None
