"""The training stage end to end: it learns, it resumes exactly, it evaluates, it fails clearly.

Runs go through the real CLI entry points (in-process where only the result
matters, in a subprocess where the exit code and stderr are the behaviour).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnserve.training.cli import eval_main, resolve_config, train_main
from attnserve.training.config import PRESETS, ConfigError, TrainConfig
from attnserve.training.data import load_examples
from attnserve.training.run import load_model, load_run_tokenizers
from attnserve.training.train import StopRequested, train

BIN = Path(sys.executable).parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_reverse_tsv(path: Path, n: int, seed: int = 0, alphabet: str = "abcdefgh") -> Path:
    """`source<TAB>reversed source` for n distinct random strings of 2..7 letters."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while len(seen) < n:
        seen.add("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 7))))
    path.write_text("".join(f"{s}\t{s[::-1]}\n" for s in sorted(seen)))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def cli(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(BIN / name), *args], capture_output=True, text=True, timeout=timeout, env=env)


def reverse_task_args(data: Path, out: Path, *sets: str) -> list[str]:
    base = ["--preset", "tiny", "--out", str(out), "--set", f"dataset={data}", "--set", "task=seq2seq"]
    base += ["--set", "tgt_tokenizer=char"]
    for s in sets:
        base += ["--set", s]
    return base


# ---- it learns --------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_preset_learns_to_reverse_strings(tmp_path):
    data = write_reverse_tsv(tmp_path / "reverse.tsv", 3000)
    run = tmp_path / "run"
    # the tiny preset's own budget: 400 steps of 1024 tokens, cosine to zero
    assert train_main(reverse_task_args(data, run, "eval_every=400")) == 0
    assert eval_main([str(run), "--split", "test"]) == 0
    report = json.loads((run / "eval_test.json").read_text())
    held_out = {e.source for e in load_examples(str(data), "test")}
    assert not held_out & {e.source for e in load_examples(str(data), "train")}
    assert report["examples"] == len(held_out) > 100
    assert report["exact_match"] >= 95.0, report
    assert report["token_accuracy"] >= report["exact_match"]  # per character, not per whole string
    dev = read_jsonl(run / "metrics.jsonl")
    assert dev[-1]["step"] == 400 and dev[-1]["exact_match"] >= 90.0


# ---- G2P on a slice of CMUdict ------------------------------------------------------------------
@pytest.mark.slow
def test_g2p_smoke_on_a_cmudict_slice(tmp_path):
    run = tmp_path / "g2p"
    sets = ["train_limit=400", "max_steps=40", "eval_every=20", "eval_limit=40", "checkpoint_every=20", "log_every=10"]
    assert train_main(["--preset", "tiny", "--out", str(run), *[a for s in sets for a in ("--set", s)]]) == 0
    for name in ("checkpoint.pt", "best.pt", "src_tokenizer.json", "tgt_tokenizer.json", "config.json"):
        assert (run / name).is_file(), name
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [20, 40]
    assert [r["step"] for r in read_jsonl(run / "train_log.jsonl")] == [1, 10, 20, 30, 40]
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 40 and ckpt["config"]["d_model"] == PRESETS["tiny"]["d_model"]
    model = load_model(run)
    src_tok, tgt_tok = load_run_tokenizers(run)
    assert src_tok.encode("ATTENTION").ids == src_tok.encode("attention").ids  # the source normalizes case
    assert model.cfg.tgt_vocab_size == tgt_tok.get_vocab_size() > 40  # ARPAbet with stress digits

    result = cli("attnserve-eval", str(run), "--split", "dev", "--limit", "25")
    assert result.returncode == 0, result.stderr
    report = json.loads((run / "eval_dev.json").read_text())
    assert report["words"] == 25 and report["split"] == "dev"
    assert 0.0 <= report["wer_no_stress"] <= report["wer"] <= 100.0
    assert 0.0 <= report["per_no_stress"] <= report["per"]  # PER may pass 100 when a weak model inserts a lot
    assert json.loads(result.stdout)["wer"] == report["wer"]


# ---- resume ---------------------------------------------------------------------------------------
RESUME_SETS = (
    "max_steps=12",
    "log_every=1",
    "dropout=0.1",  # dropout on: the RNG state must be restored too
    "warmup_steps=4",
    "schedule=inverse_sqrt",  # the lr moves within 12 steps, so the scheduler state matters
    "eval_every=1000",
    "eval_limit=20",
    "checkpoint_every=1000",
)


def resume_config(data: Path) -> TrainConfig:
    sets = [f"dataset={data}", "task=seq2seq", "tgt_tokenizer=char", *RESUME_SETS]
    return resolve_config(preset="tiny", overrides=sets)


@pytest.fixture
def interactive_sigint():
    """SIGINT as an interactive shell leaves it (Python's KeyboardInterrupt handler), whatever pytest
    started with: under `&` in a non-interactive shell, and on some CI runners, it is SIG_IGN.
    The handler found is put back afterwards."""
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield signal.default_int_handler
    signal.signal(signal.SIGINT, found)


def test_resume_after_a_signal_continues_the_same_loss_curve(tmp_path, interactive_sigint):
    data = write_reverse_tsv(tmp_path / "small.tsv", 600)  # a few batches per epoch: 12 steps cross epochs
    cfg = resume_config(data)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train(cfg, whole)

    def interrupt_at_5(step: int, loss: float, model) -> None:
        if step == 5:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered mid-run

    with pytest.raises(StopRequested) as stopped:
        train(cfg, parts, on_step=interrupt_at_5)
    assert stopped.value.step == 5
    assert torch.load(parts / "checkpoint.pt", weights_only=False)["step"] == 5
    assert signal.getsignal(signal.SIGINT) is interactive_sigint  # train restored the handler it found

    seen: list[int] = []
    train(cfg, parts, resume=True, on_step=lambda step, loss, model: seen.append(step))
    assert seen == list(range(6, 13))  # the first step after resuming is k + 1

    a, b = read_jsonl(whole / "train_log.jsonl"), read_jsonl(parts / "train_log.jsonl")
    assert [r["step"] for r in b] == list(range(1, 13))
    assert [r["loss"] for r in b] == [r["loss"] for r in a]  # bit-identical on one machine
    assert [r["lr"] for r in b] == [r["lr"] for r in a]
    ckpt_whole = torch.load(whole / "checkpoint.pt", weights_only=False)
    ckpt_parts = torch.load(parts / "checkpoint.pt", weights_only=False)
    assert (ckpt_parts["epoch"], ckpt_parts["batch_pos"]) == (ckpt_whole["epoch"], ckpt_whole["batch_pos"])
    assert ckpt_whole["epoch"] >= 1  # the run really crossed an epoch boundary
    for name, tensor in ckpt_whole["state_dict"].items():
        assert torch.equal(tensor, ckpt_parts["state_dict"][name]), name


@pytest.mark.slow
def test_the_signal_test_passes_when_pytest_starts_with_sigint_ignored(tmp_path):
    # As under `cmd &` in a script: an ignored signal stays ignored across exec, and Python then leaves it so.
    name = "test_resume_after_a_signal_continues_the_same_loss_curve"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", f"{__file__}::{name}", "-q", "-p", "no:cacheprovider", "--basetemp", tmp_path],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout


def test_checkpoint_averaging_keeps_the_last_snapshots_and_scores_their_mean(tmp_path):
    from attnserve.training.train import average_snapshots, dev_score

    data = write_reverse_tsv(tmp_path / "small.tsv", 600)
    sets = [f"dataset={data}", "task=seq2seq", "tgt_tokenizer=char", "max_steps=12", "checkpoint_every=3"]
    cfg = resolve_config(preset="tiny", overrides=[*sets, "average_last=3", "eval_every=6"])
    out = tmp_path / "run"
    train(cfg, out)
    snapshots = sorted(p.name for p in (out / "averaging").iterdir())
    assert snapshots == ["step-0000006.pt", "step-0000009.pt", "step-0000012.pt"]  # only the last three
    states = [torch.load(out / "averaging" / name, weights_only=True) for name in snapshots]
    model = load_model(out, which="last")
    assert average_snapshots(model, out, 3) == [6, 9, 12]
    for name, tensor in model.state_dict().items():
        expected = sum(s[name].double() for s in states) / 3
        assert torch.allclose(tensor.double(), expected, atol=1e-6), name
    averaged = read_jsonl(out / "metrics.jsonl")[-1]
    assert averaged["averaged_steps"] == [6, 9, 12] and averaged["step"] == 12
    # best.pt holds the mean exactly when the mean scored better than every periodic eval
    periodic = [dev_score("seq2seq", m) for m in read_jsonl(out / "metrics.jsonl") if "averaged_steps" not in m]
    best = torch.load(out / "best.pt", weights_only=False)["state_dict"]
    is_mean = all(torch.allclose(best[k].double(), v.double(), atol=1e-6) for k, v in model.state_dict().items())
    assert is_mean == (dev_score("seq2seq", averaged) < min(periodic))


def test_dev_score_breaks_a_tie_of_the_headline_metric_with_the_second():
    from attnserve.training.train import dev_score

    last = {"wer": 33.2, "per": 9.35}
    mean_of_checkpoints = {"wer": 33.2, "per": 9.33}  # the shipped model's case: same WER, lower PER
    assert dev_score("g2p", mean_of_checkpoints) < dev_score("g2p", last)
    assert dev_score("g2p", {"wer": 33.1, "per": 12.0}) < dev_score("g2p", last)  # WER decides first
    better = {"exact_match": 50.0, "token_accuracy": 90.0}
    assert dev_score("seq2seq", better) < dev_score("seq2seq", {"exact_match": 50.0, "token_accuracy": 80.0})


def test_resume_via_cli_with_more_steps_matches_and_drops_stale_log_lines(tmp_path):
    data = write_reverse_tsv(tmp_path / "small.tsv", 600)
    cfg = resume_config(data)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train(cfg, whole)
    args = reverse_task_args(data, parts, *RESUME_SETS)
    assert train_main([*args, "--set", "max_steps=7"]) == 0
    # a run killed after step 7 may have logged steps it never checkpointed: resume redoes them
    with open(parts / "train_log.jsonl", "a") as f:
        f.write(json.dumps({"step": 8, "loss": 123.0, "lr": 0.0, "tokens_per_s": 0.0}) + "\n")
    assert train_main(["--out", str(parts), "--resume", "--set", "max_steps=12"]) == 0
    a, b = read_jsonl(whole / "train_log.jsonl"), read_jsonl(parts / "train_log.jsonl")
    assert [r["step"] for r in b] == list(range(1, 13))
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], abs=1e-6)
    assert json.loads((parts / "config.json").read_text())["max_steps"] == 12


def test_resume_refuses_a_different_model_and_a_fresh_run_refuses_to_overwrite(tmp_path, capsys):
    data = write_reverse_tsv(tmp_path / "small.tsv", 300)
    run = tmp_path / "run"
    assert train_main(reverse_task_args(data, run, "max_steps=2", "eval_limit=5")) == 0
    capsys.readouterr()
    assert train_main(reverse_task_args(data, run, "max_steps=2")) == 2
    assert "already holds a run: pass --resume" in capsys.readouterr().err
    assert train_main(["--out", str(run), "--resume", "--set", "d_model=32"]) == 2
    err = capsys.readouterr().err
    assert "differs from the config in ['d_model']" in err and "cannot change" in err
    assert train_main(["--out", str(run), "--resume", "--set", "max_steps=3"]) == 0  # what may change


# ---- any parallel data: BPE on JSONL ------------------------------------------------------------
def test_bpe_on_jsonl_trains_and_evaluates_with_sequence_metrics(tmp_path):
    rng = random.Random(1)
    words = ["the", "cat", "dog", "sat", "ran", "on", "a", "mat", "log", "big", "small", "red"]
    lines = []
    for _ in range(400):
        sent = " ".join(rng.choice(words) for _ in range(rng.randint(2, 5)))
        lines.append(json.dumps({"source": sent, "target": " ".join(reversed(sent.split()))}))
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(lines) + "\n")
    run = tmp_path / "bpe"
    sets = [f"dataset={data}", "task=seq2seq", "src_tokenizer=bpe", "tgt_tokenizer=bpe", "bpe_vocab_size=60"]
    sets += ["max_steps=20", "eval_every=1000", "eval_limit=10"]
    assert train_main(["--preset", "tiny", "--out", str(run), *[a for s in sets for a in ("--set", s)]]) == 0
    src_tok, tgt_tok = load_run_tokenizers(run)
    assert json.loads(src_tok.to_str())["model"]["type"] == "BPE"
    assert tgt_tok.get_vocab_size() <= 60
    assert eval_main([str(run), "--split", "dev", "--limit", "15"]) == 0
    report = json.loads((run / "eval_dev.json").read_text())
    assert report["examples"] == 15
    assert {"exact_match", "token_accuracy", "chrf"} <= report.keys() and "wer" not in report
    assert all(0.0 <= report[k] <= 100.0 for k in ("exact_match", "token_accuracy", "chrf"))


# ---- configuration ----------------------------------------------------------------------------
def test_presets_then_yaml_then_set(tmp_path):
    tiny, base = resolve_config("tiny"), resolve_config("base")
    assert (tiny.d_model, tiny.n_encoder_layers, tiny.max_steps) == (64, 2, PRESETS["tiny"]["max_steps"])
    assert (base.d_model, base.n_encoder_layers, base.d_ff) == (256, 3, 1024)
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("d_model: 128\nlr: 1e-3\nmax_steps: 50\n")  # YAML reads 1e-3 as a string
    cfg = resolve_config("tiny", yaml_file, ["max_steps=7", "tie_embeddings=false"])
    assert (cfg.d_model, cfg.lr, cfg.max_steps, cfg.tie_embeddings) == (128, 1e-3, 7, False)
    assert cfg.d_ff == PRESETS["tiny"]["d_ff"]
    assert resolve_config().d_model == TrainConfig().d_model


@pytest.mark.parametrize(
    "values, message",
    [
        ({"d_modle": 64}, r"unknown config key\(s\) \['d_modle'\]; valid keys: .*d_model"),
        ({"lr": "fast"}, r"'lr': 'fast' is not a valid float"),
        ({"max_steps": 2.5}, r"'max_steps': 2.5 is not a valid int"),
        ({"tie_embeddings": "maybe"}, r"not a valid bool"),
        ({"schedule": "linear"}, r"schedule must be one of inverse_sqrt, cosine"),
        ({"src_tokenizer": "spm"}, r"src_tokenizer must be one of char, whitespace, bpe"),
        ({"max_tokens": 0}, r"max_tokens must be positive"),
        ({"dropout": 1.5}, r"dropout must be in \[0, 1\)"),
        ({"d_model": 30}, r"divisible by n_heads"),
    ],
)
def test_bad_config_values_are_named(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(values)


# ---- bad input through the CLI: one clear line, non-zero exit, no traceback ---------------------
def bad_input_cases(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "bad.tsv").write_text("ab\tba\ncd\tdc\nno-tab-here\n")
    (tmp / "bad.jsonl").write_text('{"source": "ab", "target": "ba"}\n{"source": "cd", "target": }\n')
    (tmp / "empty.tsv").write_text("\n")
    (tmp / "unknown.yaml").write_text("d_model: 64\nlayers: 3\n")
    (tmp / "broken.yaml").write_text("d_model: [64\n")
    out = ["--out", str(tmp / "run")]
    return [
        ([*out, "--set", f"dataset={tmp / 'bad.tsv'}"], "bad.tsv:3: expected 'source<TAB>target'"),
        ([*out, "--set", f"dataset={tmp / 'bad.jsonl'}"], 'bad.jsonl:2: expected a JSON object with "source"'),
        ([*out, "--set", f"dataset={tmp / 'empty.tsv'}"], "empty.tsv: no examples found"),
        ([*out, "--set", f"dataset={tmp / 'missing.tsv'}"], "data file not found:"),
        ([*out, "--set", "layers=3"], "unknown config key 'layers'; valid keys: activation, average_last, bpe_vocab_size"),
        ([*out, "--config", str(tmp / "unknown.yaml")], "unknown.yaml: unknown config key(s) ['layers']; valid keys:"),
        ([*out, "--config", str(tmp / "broken.yaml")], "broken.yaml:2: not valid YAML"),
        ([*out, "--config", str(tmp / "missing.yaml")], "config file not found:"),
        ([*out, "--set", "lr=fast"], "'lr': 'fast' is not a valid float"),
        ([*out, "--resume"], "has no config.json"),
    ]


def test_bad_input_gets_one_clear_error_and_nonzero_exit(tmp_path):
    for args, expected in bad_input_cases(tmp_path):
        result = cli("attnserve-train", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        assert [line for line in result.stderr.splitlines() if line.strip()] == [result.stderr.strip()]
    result = cli("attnserve-eval", str(tmp_path / "no-such-run"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "neither a run directory" in result.stderr


def test_auto_precision_uses_bf16_only_where_the_device_accelerates_it():
    """bf16 autocast is emulated on an AVX2-only CPU (about 23x slower on the default recipe)."""
    import torch

    from attnserve.training.train import bf16_accelerated

    cpu = torch.device("cpu")
    assert bf16_accelerated(torch.device("cuda"))
    assert bf16_accelerated(cpu, "flags : fpu sse2 avx2 avx512f avx512_bf16 amx_tile")
    assert bf16_accelerated(cpu, "flags : fpu avx2 amx_bf16 amx_tile")
    assert not bf16_accelerated(cpu, "flags : fpu sse2 avx2 fma")
    assert not bf16_accelerated(cpu, "flags : fpu avx2 avx512f avx512bw")  # AVX-512 without its bf16 extension
