"""DDP: `torchrun --nproc_per_node 2` with gloo on CPU.

Each rank must train on its own shard (different losses at every step) while
DDP keeps the replicas identical (same weights after every step). The ranks
record both through `train`'s `on_step` hook; this file is also the worker
script torchrun starts (see the __main__ block).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

STEPS = 6


def weights_digest(model) -> str:
    """sha256 over every parameter's bytes: equal digests mean bit-identical replicas."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def worker(data: Path, out: Path, trace_dir: Path) -> None:
    from attnserve.training.cli import resolve_config
    from attnserve.training.train import train

    rank = int(os.environ["RANK"])
    trace = trace_dir / f"rank{rank}.jsonl"

    def record(step: int, loss: float, model) -> None:
        with open(trace, "a") as f:
            f.write(json.dumps({"step": step, "loss": loss, "weights": weights_digest(model)}) + "\n")

    sets = [f"dataset={data}", "task=seq2seq", "tgt_tokenizer=char", f"max_steps={STEPS}", "log_every=1"]
    sets += ["dropout=0.1", "eval_every=1000", "eval_limit=10", "max_tokens=256"]
    train(resolve_config("tiny", overrides=sets), out, on_step=record)


@pytest.mark.slow
def test_ddp_two_ranks_own_shards_identical_weights(tmp_path):
    import torch

    rng = random.Random(0)
    words = {"".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))) for _ in range(400)}
    data = tmp_path / "reverse.tsv"
    data.write_text("".join(f"{w}\t{w[::-1]}\n" for w in sorted(words)))
    out, traces = tmp_path / "run", tmp_path / "traces"
    traces.mkdir()
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", __file__, str(data), str(out), str(traces)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    ranks = [[json.loads(line) for line in (traces / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert [r["step"] for r in ranks[0]] == [r["step"] for r in ranks[1]] == list(range(1, STEPS + 1))
    for a, b in zip(*ranks):
        assert a["loss"] != b["loss"], f"step {a['step']}: both ranks saw the same batch"
        assert a["weights"] == b["weights"], f"step {a['step']}: replicas diverged"
    assert len({r["weights"] for r in ranks[0]}) == STEPS  # the weights did move every step

    # only rank 0 wrote the run directory: one log line per step, and the logged loss is the ranks' mean
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, STEPS + 1))
    for entry, a, b in zip(log, *ranks):
        assert entry["loss"] == pytest.approx((a["loss"] + b["loss"]) / 2, rel=1e-5)
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == STEPS
    states = ckpt["rng_per_rank"]  # each rank's own dropout stream, for an exact resume
    assert len(states) == 2 and not torch.equal(states[0]["torch"], states[1]["torch"])


if __name__ == "__main__":  # a torchrun worker
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    worker(*(Path(a) for a in sys.argv[1:4]))
