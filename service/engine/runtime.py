"""Where the engine runs: the CPUs this process may use, and whether a GPU is really there."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import onnxruntime as ort


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup v2/v1 CPU quota."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        try:
            q = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
            p = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
            if q > 0:
                n = min(n, max(1, q // p))
        except (OSError, ValueError):
            pass
    return max(1, n)


def gpu_present() -> bool:
    """CUDA only when ONNX Runtime has the provider AND an NVIDIA device is really there;
    onnxruntime-gpu on a CPU-only machine otherwise logs loud errors and falls back."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return Path("/dev/nvidiactl").exists() or (gpus.is_dir() and any(gpus.iterdir()))


ENGINE_THREAD_OS_NAME = "attnserve-eng"  # Linux keeps 15 bytes of a thread's name


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the OS too (Linux `/proc/PID/task/TID/comm`, top -H, perf), so
    the engine thread's CPU can be told from the event loop's; Python's thread names stay in Python."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass  # a name is a convenience, never a reason to fail
