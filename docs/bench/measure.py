"""What every script in docs/bench/ records beside its figures, and how it times a call.

Two sessions on the same kind of 2-core VM have had different CPUs (AMD EPYC with AVX-512 and VNNI in
one, AVX2 only in another), and int8 and attention kernels take different paths on each. So every report
names the CPU with the extensions that change those paths, and a figure is compared only with figures
taken on the same CPU.

    from measure import call_times, cpu_model, machine  # docs/bench/, beside the script
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

from service.engine.runtime import cpu_model  # one reading of the CPU for these scripts and attnserve-bench


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
