"""`attnserve-train --init-from BUNDLE` and fine-tuning a user's pairs (training/warmstart.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_weights import bundle_step_logits

from attnserve.training.cli import eval_main, resolve_config, train_main
from attnserve.training.config import ConfigError
from attnserve.training.data import DataError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_run_from_a_bundle_that_takes_no_step_exports_the_same_logits(tiny_bundle_dir, tmp_path):
    """The round trip: bundle -> --init-from run (max_steps 0) -> attnserve-export build -> bundle."""
    from attnserve.export.pipeline.build import build

    run = tmp_path / "run"
    sets = ["max_steps=0", "eval_limit=20", "threads=1"]
    assert train_main(["--init-from", str(tiny_bundle_dir), "--out", str(run), *sum((["--set", s] for s in sets), [])]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["init_from"] == str(tiny_bundle_dir)
    rebuilt = tmp_path / "rebuilt"
    build(run, rebuilt, model_id="g2p-tiny", eval_limit=50, parity_limit=256, threads=1, log=lambda _m: None, fp16=False)
    configs = [json.loads((b / "bundle.json").read_text())["config"] for b in (rebuilt, tiny_bundle_dir)]
    assert configs[0] == configs[1]
    for ours, theirs in zip(bundle_step_logits(rebuilt), bundle_step_logits(tiny_bundle_dir)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


def test_the_architecture_comes_from_the_bundle_unless_a_key_is_set_otherwise(tiny_bundle_dir, tmp_path):
    bundle = json.loads((tiny_bundle_dir / "bundle.json").read_text())["config"]
    # a preset is not an explicit choice: the bundle's shape replaces it
    cfg = resolve_config(preset="base", overrides=["lr=1e-4"], init_from=tiny_bundle_dir)
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.lr) == (bundle["d_model"], bundle["n_heads"], bundle["d_ff"], 1e-4)
    assert cfg.init_from == str(tiny_bundle_dir)
    # an explicit key equal to the bundle's is fine; one that differs is refused by name
    assert resolve_config(overrides=[f"d_model={bundle['d_model']}"], init_from=tiny_bundle_dir).d_model == bundle["d_model"]
    with pytest.raises(ConfigError, match=r"n_heads=2 \(the bundle has 4\)"):
        resolve_config(overrides=["n_heads=2"], init_from=tiny_bundle_dir)
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("d_ff: 999\ntgt_tokenizer: bpe\nlr: 0.0001\n")
    with pytest.raises(ConfigError, match=r"d_ff=999 .*tgt_tokenizer='bpe'"):
        resolve_config(config=yaml_file, init_from=tiny_bundle_dir)


def test_init_from_a_directory_that_is_not_a_bundle_is_one_line(tmp_path, capsys):
    assert train_main(["--init-from", str(tmp_path), "--out", str(tmp_path / "run")]) == 2
    assert "has no bundle.json" in capsys.readouterr().err


def test_eval_scores_the_variant_it_is_asked_for(tiny_bundle_dir, tmp_path, capsys):
    for variant in ("fp32", "int8"):
        out = tmp_path / f"{variant}.json"
        assert eval_main([str(tiny_bundle_dir), "--split", "dev", "--limit", "20", "--variant", variant, "--out", str(out)]) == 0
        assert json.loads(out.read_text())["variant"] == variant
    capsys.readouterr()
    assert eval_main([str(tiny_bundle_dir), "--limit", "5", "--variant", "fp8", "--out", str(tmp_path / "x.json")]) == 2
    assert "no variant 'fp8'" in capsys.readouterr().err


# ---- fine-tuning a user's pairs -------------------------------------------------------------
FINETUNE_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "g2p-finetune.yaml"
# Made-up words; "zanthor" falls in CMUdict's dev bucket of the hash split, and trains all the same.
TAUGHT = {
    "zorblax": "Z AO1 R B L AE2 K S",
    "quentrofy": "K W EH1 N T R AH0 F AY2",
    "blimvik": "B L IH1 M V IH0 K",
    "snargle": "S N AA1 R G AH0 L",
    "zanthor": "Z AE1 N TH AO0 R",
}
# The recipe's shape at the tiny model's scale: its learning rate, a short schedule, replay drawn
# from the 4,000 words the fixture was trained on.
TINY_FINETUNE = [
    *("lr=0.003", "max_steps=60", "replay_pairs=1000", "finetune_repeat=16", "train_limit=4000"),
    *("dropout=0", "eval_every=1000", "eval_limit=50", "threads=1"),
]


def _finetune_cfg(bundle: Path, data: Path, *sets: str):
    return resolve_config(config=FINETUNE_CONFIG, overrides=[f"finetune_data={data}", *sets], init_from=bundle)


def _greedy_and_test_wer(model, src_tok, tgt_tok, words: list[str]) -> tuple[list[str], float]:
    from attnserve.training.data import load_examples
    from attnserve.training.decode import decode_examples
    from attnserve.training.metrics import task_metrics
    from attnserve.training.tokenize import tokens

    test = load_examples("cmudict", "test", limit=500)
    hyps = decode_examples(model, src_tok, tgt_tok, [e.source for e in test], 250)
    report = task_metrics("g2p", [e.source for e in test], hyps, [e.targets for e in test], lambda t: tokens(tgt_tok, t))
    return decode_examples(model, src_tok, tgt_tok, words, 16), report["wer"]


def test_a_bundle_fine_tuned_on_a_few_words_learns_them_and_keeps_its_test_wer(tiny_bundle_dir, tmp_path):
    from attnserve.training.config import ModelConfig
    from attnserve.training.model import Transformer
    from attnserve.training.run import load_model
    from attnserve.training.warmstart import bundle_state_dict, bundle_tokenizers

    data = tmp_path / "my_words.tsv"
    data.write_text("".join(f"{w}\t{p}\n" for w, p in TAUGHT.items()))
    run = tmp_path / "run"
    sets = sum((["--set", s] for s in [f"finetune_data={data}", *TINY_FINETUNE]), [])
    assert train_main(["--config", str(FINETUNE_CONFIG), "--init-from", str(tiny_bundle_dir), "--out", str(run), *sets]) == 0

    src_tok, tgt_tok = bundle_tokenizers(tiny_bundle_dir)
    config, state = bundle_state_dict(tiny_bundle_dir)
    before = Transformer(ModelConfig.from_dict(config)).eval()
    before.load_state_dict(state)
    words = list(TAUGHT)
    said_before, wer_before = _greedy_and_test_wer(before, src_tok, tgt_tok, words)
    said_after, wer_after = _greedy_and_test_wer(load_model(run), src_tok, tgt_tok, words)
    assert all(said != TAUGHT[w] for w, said in zip(words, said_before))
    assert dict(zip(words, said_after)) == TAUGHT
    assert abs(wer_after - wer_before) <= 1.0, (wer_before, wer_after)


def test_finetune_data_needs_a_bundle(tmp_path):
    data = tmp_path / "w.tsv"
    data.write_text("zorblax\tZ AO1 R B L AE2 K S\n")
    from attnserve.training.train import train

    with pytest.raises(ConfigError, match="finetune_data needs init_from"):
        train(resolve_config(preset="tiny", overrides=[f"finetune_data={data}"]), tmp_path / "run")


def test_a_target_symbol_outside_the_bundle_vocabulary_is_refused_with_file_and_line(tiny_bundle_dir, tmp_path):
    from attnserve.training.train import train

    data = tmp_path / "mine.tsv"
    data.write_text("zorblax\tZ AO1 R B L AE2 K S\nquuxly\tK W AH1 K S L IY0 XX9\n")
    with pytest.raises(DataError, match=rf"{data}:2: target symbol\(s\) 'XX9' not in the bundle's target vocabulary"):
        train(_finetune_cfg(tiny_bundle_dir, data), tmp_path / "run")
    data.write_text("zorblax\tZ AO1 R B L AE2 K S\n\nzo#rb\tZ AO1 R B\n")
    with pytest.raises(DataError, match=rf"{data}:3: source character\(s\) '#' not in the bundle's source vocabulary"):
        train(_finetune_cfg(tiny_bundle_dir, data), tmp_path / "run")


def test_dev_data_names_the_whole_dev_set_and_eval_limit_caps_it(tmp_path):
    """A user's dev file replaces the dictionary's dev split: all of its words, grouped by source, up to eval_limit."""
    from attnserve.training.config import TrainConfig
    from attnserve.training.warmstart import dev_examples

    dev = tmp_path / "dev.tsv"
    dev.write_text("quentrofy\tK W EH1 N T R AH0 F AY2\nzorbal\tZ AO1 R B AH0 L\nzorbal\tZ AO1 R B AE2 L\n")
    cfg = TrainConfig(dataset="cmudict", dev_data=str(dev), eval_limit=0)
    examples = dev_examples(cfg)
    assert [e.source for e in examples] == ["quentrofy", "zorbal"]
    assert len(examples[1].targets) == 2  # a word's every listed pronunciation counts as right
    assert len(dev_examples(TrainConfig(dataset="cmudict", dev_data=str(dev), eval_limit=1))) == 1
    default = dev_examples(TrainConfig(dataset="cmudict", eval_limit=5))
    assert len(default) == 5 and "quentrofy" not in {e.source for e in default}  # without it: CMUdict's dev split
