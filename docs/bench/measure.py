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
from pathlib import Path

# /proc/cpuinfo flag -> how docs/BENCHMARKS.md names it; the first of AVX-512 and AVX2 found is the vector width
EXTENSIONS = [("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx512_vnni", "VNNI"), ("avx512_bf16", "bf16")]


def cpu_model() -> str:
    """The CPU's model name and its vector extensions, e.g. "AMD EPYC AVX-512 VNNI bf16"."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), platform.machine())
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    found = [label for flag, label in EXTENSIONS if flag in flags]
    if "AVX-512" in found and "AVX2" in found:
        found.remove("AVX2")
    return " ".join([name, *found])


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
