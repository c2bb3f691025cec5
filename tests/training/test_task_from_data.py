"""A config that names no task takes it from its dataset: a pronouncing dictionary is G2P, pairs of text seq2seq."""

import json

from attnserve.training.cli import train_main
from attnserve.training.config import TrainConfig

FAST = ["max_steps=2", "eval_every=2", "checkpoint_every=2", "eval_limit=8", "log_every=1", "threads=1"]


def test_auto_task_follows_the_dataset():
    assert TrainConfig().task == "auto" and TrainConfig().resolved_task().task == "g2p"
    assert TrainConfig(dataset="lexicon.dict").resolved_task().task == "g2p"
    assert TrainConfig(dataset="pairs.tsv").resolved_task().task == "seq2seq"
    assert TrainConfig(dataset="numbers").resolved_task().task == "seq2seq"
    assert TrainConfig(dataset="pairs.tsv", task="g2p").resolved_task().task == "g2p"  # a given task stays


def test_a_file_of_pairs_without_a_task_trains_as_seq2seq(tmp_path):
    data = tmp_path / "dates.tsv"
    data.write_text("".join(f"{d}.{m}.21\t2021-{m:02d}-{d:02d}\n" for d in range(1, 29) for m in range(1, 13)))
    run = tmp_path / "run"
    args = ["--preset", "tiny", "--out", str(run), "--set", f"dataset={data}", "--set", "tgt_tokenizer=char"]
    assert train_main(args + [a for s in FAST for a in ("--set", s)]) == 0
    assert json.loads((run / "config.json").read_text())["task"] == "seq2seq"
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert "exact_match" in last and "wer" not in last  # scored as text, not as words of phonemes
