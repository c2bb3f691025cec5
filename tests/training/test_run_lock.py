"""One trainer per run directory: a second trainer stops with one line naming the holder; a lock left by a
dead process on this host is taken over with a warning."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnserve.training.lock import LOCK_NAME, RunLock, RunLocked

TRAIN = [sys.executable, "-m", "attnserve.training", "--preset", "tiny", "--set", "dataset=numbers", "--set", "task=seq2seq"]
TRAIN += ["--set", "tgt_tokenizer=char", "--set", "max_source_len=64", "--set", "threads=1", "--set", "eval_limit=20"]


def dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_trainer_on_a_run_directory_stops_with_one_line_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen(
        [*TRAIN, "--set", "max_steps=100000", "--set", "eval_every=100000", "--out", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock = run / LOCK_NAME
        deadline = time.monotonic() + 120
        while not (run / "config.json").exists():  # written after the lock is taken, once the run is set up
            assert first.poll() is None, first.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the first trainer never started"
            time.sleep(0.2)
        record = json.loads(lock.read_text())
        assert record["pid"] == first.pid and record["host"] == socket.gethostname()

        for extra in (["--resume"], []):  # continuing the run, or starting one over it
            second = subprocess.run([*TRAIN, "--set", "max_steps=5", "--out", str(run), *extra], capture_output=True, text=True)
            assert second.returncode == 2, second.stderr[-2000:]
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1, second.stderr
            assert f"PID {first.pid} on {socket.gethostname()}" in lines[0] and str(lock) in lines[0]
        assert first.poll() is None  # the holder trains on, its lock untouched
        assert json.loads(lock.read_text()) == record
    finally:
        first.send_signal(signal.SIGTERM)  # saves and stops
        first.wait(timeout=120)
    assert not (run / LOCK_NAME).exists()  # released on the way out


def test_a_stale_lock_from_a_dead_process_on_this_host_is_taken_over_with_a_warning(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    stale = {"host": socket.gethostname(), "pid": dead_pid(), "started": time.time() - 3600}
    (run / LOCK_NAME).write_text(json.dumps(stale))
    proc = subprocess.run(
        [*TRAIN, "--set", "max_steps=2", "--set", "eval_every=2", "--set", "eval_limit=5", "--out", str(run)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"WARNING: taking over {run / LOCK_NAME} from PID {stale['pid']}" in proc.stderr
    assert (run / "checkpoint.pt").is_file() and not (run / LOCK_NAME).exists()


def test_a_live_or_foreign_lock_is_never_taken(tmp_path):
    lock = tmp_path / LOCK_NAME
    for record in (
        {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()},  # alive: this very process
        {"host": "another-host.example", "pid": dead_pid(), "started": time.time()},  # cannot be checked from here
    ):
        lock.write_text(json.dumps(record))
        with pytest.raises(RunLocked, match=f"PID {record['pid']} on {record['host']}"):
            RunLock(tmp_path).acquire()
        assert json.loads(lock.read_text()) == record
    lock.unlink()
    with RunLock(tmp_path) as held:
        assert json.loads(lock.read_text())["pid"] == os.getpid() == held.record["pid"]
    assert not lock.exists()


def ddp_worker(out: Path, trace_dir: Path) -> None:
    """torchrun worker: each rank records its PID and the lock file as it stands after step 1."""
    from attnserve.training.cli import resolve_config
    from attnserve.training.train import train

    rank = int(os.environ["RANK"])

    def record(step: int, loss: float, model) -> None:
        if step == 1:
            lock = out / LOCK_NAME
            (trace_dir / f"rank{rank}.json").write_text(
                json.dumps({"pid": os.getpid(), "lock": json.loads(lock.read_text()) if lock.exists() else None})
            )

    sets = ["dataset=numbers", "task=seq2seq", "tgt_tokenizer=char", "max_source_len=64", "max_steps=2"]
    sets += ["eval_every=1000", "eval_limit=5", "max_tokens=256"]
    train(resolve_config("tiny", overrides=sets), out, on_step=record)


@pytest.mark.slow
def test_a_ddp_job_takes_one_lock_on_rank_0_and_a_refused_job_stops_every_rank(tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[2]

    def job(out: Path, traces: Path) -> subprocess.CompletedProcess:
        traces.mkdir()
        cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", __file__, str(out), str(traces)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=root)

    result = job(tmp_path / "run", tmp_path / "traces")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = [json.loads((tmp_path / "traces" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["lock"]["pid"] == ranks[0]["pid"] != ranks[1]["pid"]  # rank 0's PID: one lock for the job
    assert ranks[1]["lock"] == ranks[0]["lock"]
    assert list((tmp_path / "run").glob("*.lock")) == []  # released at the end

    held = tmp_path / "held"
    held.mkdir()
    (held / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}))
    refused = job(held, tmp_path / "traces-refused")  # the timeout catches a rank left waiting
    assert refused.returncode != 0
    assert f"PID {os.getpid()} on {socket.gethostname()}" in refused.stdout + refused.stderr
    assert not list((tmp_path / "traces-refused").iterdir())  # no rank took a step


if __name__ == "__main__":  # a torchrun worker
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    ddp_worker(*(Path(a) for a in sys.argv[1:3]))
