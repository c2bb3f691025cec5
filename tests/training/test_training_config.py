"""Training a user's own pairs: a tokenizer that cannot read the dev set is a loud warning at the start, naming the
setting that likely fixes it; every key and its default is one command away (`attnserve-train --help-config`)."""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from attnserve.training.cli import train_main
from attnserve.training.config import TrainConfig, config_reference
from attnserve.training.tokenize import unknown_tokens_warning


def write_reversed_words(path: Path, n: int = 300) -> Path:
    """`word<TAB>reversed word`: every target a single word, most of them seen only once."""
    rng = random.Random(0)
    seen: set[str] = set()
    while len(seen) < n:
        seen.add("".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 7))))
    path.write_text("".join(f"{w}\t{w[::-1]}\n" for w in sorted(seen)))
    return path


def train_briefly(tmp_path: Path, data: Path, *sets: str) -> None:
    args = ["--preset", "tiny", "--out", str(tmp_path / "run"), "--set", f"dataset={data}", "--set", "task=seq2seq"]
    for s in ("max_steps=1", "eval_limit=8", "eval_every=1", *sets):
        args += ["--set", s]
    assert train_main(args) == 0


@pytest.mark.usefixtures("one_torch_thread")
def test_single_word_targets_with_the_whitespace_tokenizer_warn_at_the_start(tmp_path, capsys):
    train_briefly(tmp_path, write_reversed_words(tmp_path / "rev.tsv"))
    err = capsys.readouterr().err
    warning = next(line for line in err.splitlines() if line.startswith("WARNING:"))
    assert "dev set's target tokens" in warning and "unknown" in warning
    assert "--set tgt_tokenizer=char" in warning
    assert err.index("WARNING:") < err.index("train:"), "the warning comes before the first step"


@pytest.mark.usefixtures("one_torch_thread")
def test_a_tokenizer_that_reads_the_dev_set_gives_no_warning(tmp_path, capsys):
    train_briefly(tmp_path, write_reversed_words(tmp_path / "rev.tsv"), "tgt_tokenizer=char")
    assert "WARNING" not in capsys.readouterr().err


def test_the_warning_names_the_fix_for_each_tokenizer():
    assert unknown_tokens_warning("target", "tgt_tokenizer", "char", 3, 100, from_bundle=False) is None  # a few percent
    whitespace = unknown_tokens_warning("target", "tgt_tokenizer", "whitespace", 40, 100, from_bundle=False)
    assert "40.0%" in whitespace and "--set tgt_tokenizer=char" in whitespace
    source = unknown_tokens_warning("source", "src_tokenizer", "whitespace", 9, 10, from_bundle=False)
    assert "cannot read" in source and "--set src_tokenizer=char" in source
    assert "--init-from" in unknown_tokens_warning("target", "tgt_tokenizer", "whitespace", 9, 10, from_bundle=True)


def test_the_config_reference_is_yaml_of_every_key_and_its_default():
    reference = config_reference()
    assert yaml.safe_load(reference) == asdict(TrainConfig())  # a file to start a config from
    assert "--preset tiny:" in reference
    tgt = next(line for line in reference.splitlines() if line.startswith("tgt_tokenizer:"))
    assert '"whitespace"' in tgt and '"char"' in tgt  # the default, and what single-word targets need


def test_attnserve_train_help_config_prints_the_reference_without_other_arguments(capsys):
    with pytest.raises(SystemExit) as exit_:
        train_main(["--help-config"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == config_reference()


def test_the_training_page_points_to_the_training_keys():
    page = (Path(__file__).resolve().parents[2] / "docs" / "TRAINING.md").read_text()
    training = page[: page.index("\n## ")]
    assert "attnserve-train --help-config" in training and "tgt_tokenizer=char" in training
