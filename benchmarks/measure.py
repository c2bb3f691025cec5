"""What every script in benchmarks/ records beside its figures, and how it times a call.

Two sessions on the same kind of 2-core VM have had different CPUs (AMD EPYC with AVX-512 and VNNI in
one, AVX2 only in another), and int8 and attention kernels take different paths on each. So every report
names the CPU with the extensions that change those paths, and a figure is compared only with figures
taken on the same CPU.

    from benchmarks.measure import call_times, cpu_model, machine

`signalled_totals` reads what a server's measuring `sitecustomize` writes on SIGUSR1 (gc_cost.py, tax_parts.py);
`write_report` writes a script's raw JSON, named by the script and the time.
"""

from __future__ import annotations

import ast
import json
import os
import platform
import signal
import time
from collections.abc import Callable
from pathlib import Path

from attnserve.service.engine.runtime import cpu_model  # one reading of the CPU for these scripts and attnserve-bench


def machine() -> dict:
    """The CPU, the cores this process may use, the load average and the versions a figure depends on."""
    out = {
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }
    try:
        import onnxruntime

        out["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return out


def call_times(fn: Callable[[], object], calls: int, warm_up: int) -> list[float]:
    """Seconds of each of `calls` calls of `fn()`, after `warm_up` untimed ones."""
    for _ in range(warm_up):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def signalled_totals(path: Path, pid: int, lines: int) -> dict:
    """Send SIGUSR1 to server `pid`, whose `sitecustomize` then appends one repr'd dict to `path`; return the
    `lines`-th (the totals at this moment)."""
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= lines:
            return ast.literal_eval(path.read_text().splitlines()[lines - 1])
        time.sleep(0.05)
    raise RuntimeError(f"the server did not write its totals to {path}")


def write_report(out: Path, name: str, result: dict) -> Path:
    """`result` as OUT/NAME_TIME.json (the directory made if need be); returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}_{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
