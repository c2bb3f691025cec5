"""The processes of one training run: DDP set-up under torchrun, each rank's RNG state (for an exact resume),
the run directory's lock taken once for the whole job, and stopping: the signal handler, and every rank agreeing
to halt on the same step. The loop that uses them is training/train.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from pathlib import Path

import torch
import torch.distributed as dist

from attnserve.training.lock import RunLock, RunLocked


def dist_setup() -> tuple[int, int, torch.device]:
    """(rank, world_size, device); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    return rank, world, device


def rng_state(device: torch.device) -> dict:
    """This process's RNG state (dropout draws from it), for an exact resume."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore a state `rng_state` saved."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class StopSignal:
    """While active, a first SIGINT/SIGTERM only sets `requested` (the loop stops after the
    current step and saves); a second one raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():  # signals can only be caught there
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def run_lock(out_dir: Path, rank: int, world: int):
    """The run directory's lock (training/lock.py) for the whole run: rank 0 takes it for the job and tells
    the other ranks whether it could, so a refused DDP job stops on every rank instead of hanging."""
    lock = RunLock(out_dir) if rank == 0 else None
    refusal: list[str | None] = [None]
    if lock is not None:
        try:
            lock.acquire()
        except RunLocked as e:
            refusal = [str(e)]
    if world > 1:
        dist.broadcast_object_list(refusal, src=0)
    if refusal[0] is not None:
        raise RunLocked(refusal[0])
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def all_ranks_halt(halt: bool, world: int, device: torch.device) -> bool:
    """Whether any rank wants to stop (time limit or signal), so every rank stops on the same step."""
    if world == 1:
        return halt
    flag = torch.tensor([1 if halt else 0], device=device)
    dist.all_reduce(flag)
    return bool(flag.item())
