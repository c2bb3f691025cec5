"""A config that sets no lengths sizes them from its data; pairs too long to train on are counted, warned of, and
refused past 5% unless --allow-drop."""

import json
import re

from attnserve.training.cli import train_main
from attnserve.training.config import TrainConfig
from attnserve.training.lengths import LENGTH_BUDGET, fit_lengths

FAST = ["max_steps=2", "eval_every=2", "checkpoint_every=2", "eval_limit=8", "log_every=1", "threads=1", "train_limit=300"]


def test_lengths_left_at_zero_fit_the_longest_pair_with_a_margin():
    cfg = fit_lengths(TrainConfig(), sources=[3, 55, 12], targets=[4, 20])
    assert cfg.max_source_len == 55 + 6 and cfg.max_target_len == 21 + 3  # a tenth rounded up, at least 2
    assert fit_lengths(TrainConfig(), [5], [5]).max_source_len == 7
    given = fit_lengths(TrainConfig(max_source_len=30, max_target_len=40), [55], [20])
    assert (given.max_source_len, given.max_target_len) == (30, 40)
    assert fit_lengths(TrainConfig(), [5000], [1]).max_source_len == LENGTH_BUDGET


def _numbers_run(tmp_path, *sets: str, flags: tuple[str, ...] = ()):
    args = ["--preset", "tiny", "--out", str(tmp_path / "run"), *flags]
    for s in ("dataset=numbers", "task=seq2seq", "tgt_tokenizer=bpe", *FAST, *sets):
        args += ["--set", s]
    return train_main(args)


def test_the_number_task_trains_on_every_pair_with_no_length_set(tmp_path, capsys):
    assert _numbers_run(tmp_path) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["dropped_too_long"] == 0 and metrics[-1]["train_pairs"] > 200
    # the longest source of the numbers data is well past the old fixed 48 characters
    assert config["max_source_len"] > 48 and config["max_target_len"] > 0
    assert "left out" not in capsys.readouterr().err


def test_too_many_pairs_too_long_stop_the_run_naming_the_fix(tmp_path, capsys):
    assert _numbers_run(tmp_path, "max_source_len=20") == 2
    err = capsys.readouterr().err
    assert re.search(r"\d+ of \d+ training pairs \(\d+\.\d%\) do not fit max_source_len=20", err), err
    assert "--allow-drop" in err and not (tmp_path / "run" / "checkpoint.pt").exists()


def test_allow_drop_trains_without_them_and_records_how_many(tmp_path, capsys):
    assert _numbers_run(tmp_path, "max_source_len=20", flags=("--allow-drop",)) == 0
    err = capsys.readouterr().err
    match = re.search(r"WARNING: (\d+) of (\d+) training pairs left out", err)
    assert match, err
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["dropped_too_long"] == int(match[1]) > 0
    assert last["train_pairs"] + last["dropped_too_long"] == int(match[2])
