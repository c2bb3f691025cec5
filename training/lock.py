"""One trainer per run directory: `train.lock` in the run directory records who holds it.

The file holds {"host", "pid", "started"}. It is created with O_EXCL, so of two trainers
starting together one wins. A lock whose process is gone (same host, no such PID) is stale:
the next trainer takes it over with a warning. A lock held from another host cannot be
checked from here, so it stops the trainer like a live one; the message says which file to
delete once that trainer is known to be gone. Under DDP only rank 0 takes it (train.py).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from attnserve.training.config import ConfigError

LOCK_NAME = "train.lock"


class RunLocked(ConfigError):
    """Another trainer holds the run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def holder(path: Path) -> dict | None:
    """The lock file's record, or None when there is none; an unreadable file reads as held by an unknown holder."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def describe(record: dict) -> str:
    if not record.get("pid"):
        return "an unknown trainer (unreadable lock file)"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record["started"])) if record.get("started") else "?"
    return f"PID {record['pid']} on {record.get('host', '?')} since {when}"


class RunLock:
    """`with RunLock(run_dir):` holds run_dir/train.lock for the block; raises RunLocked if another trainer holds it."""

    def __init__(self, run_dir: Path, log=lambda msg: print(msg, file=sys.stderr, flush=True)):
        self.path = Path(run_dir) / LOCK_NAME
        self.log = log
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        self.held = False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a lock removed or taken over between our look and our create: look again
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                record = holder(self.path)
                if record is None:
                    continue
                if not self._stale(record):
                    raise RunLocked(
                        f"{self.path.parent} is in use by another trainer: {describe(record)} holds {self.path}; "
                        "stop that trainer first, or delete the file if it is no longer running"
                    ) from None
                self.log(f"WARNING: taking over {self.path} from {describe(record)}, which is no longer running")
                tmp = self.path.with_name(f"{LOCK_NAME}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(self.record) + "\n")
                tmp.replace(self.path)
                break
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self.record) + "\n")
            break
        else:
            raise RunLocked(f"{self.path} keeps changing: another trainer is starting on {self.path.parent}")
        if holder(self.path) != self.record:  # two takers of one stale lock: the last write won
            raise RunLocked(f"{self.path.parent} is in use by another trainer: {describe(holder(self.path) or {})}")
        self.held = True

    def _stale(self, record: dict) -> bool:
        """A lock from this host whose process is gone."""
        pid = record.get("pid")
        return record.get("host") == self.record["host"] and isinstance(pid, int) and not _alive(pid)

    def release(self) -> None:
        if self.held and holder(self.path) == self.record:
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
