"""ONNX Runtime as the engine uses it: the CPUs this process may use, whether a GPU is really there,
the session options every session is made with, and the calls and values the decode step makes.

The decode step's calls into ONNX Runtime go through one adapter here (`StepCalls`, `OrtValues`): on the
ONNX Runtime versions it was tested on, the C++ session and C values directly (private names, for per-step
speed); anywhere else, or where those names are missing, the public API, which does the same work.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

try:  # the C module under ONNX Runtime's Python API: private, so its absence only costs speed (PRIVATE_STEP_API)
    from onnxruntime.capi import _pybind_state as C
except ImportError:  # pragma: no cover - an ONNX Runtime that moved it
    C = None

log = logging.getLogger("attnserve.engine")


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


# /proc/cpuinfo flag -> how docs/BENCHMARKS.md names it; the first of AVX-512 and AVX2 found is the vector width
EXTENSIONS = [("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx512_vnni", "VNNI"), ("avx512_bf16", "bf16")]


def cpu_model() -> str:
    """The CPU's model name and its vector extensions, e.g. "AMD EPYC AVX-512 VNNI bf16": int8 and attention
    kernels take different paths by extension, so every benchmark records this beside its figures."""
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


def gpu_present() -> bool:
    """CUDA only when ONNX Runtime has the provider AND an NVIDIA device is really there;
    onnxruntime-gpu on a CPU-only machine otherwise logs loud errors and falls back."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return Path("/dev/nvidiactl").exists() or (gpus.is_dir() and any(gpus.iterdir()))


# What ONNX Runtime's CUDA 13 build links (its own list, `_get_nvidia_dll_paths`, where the runtime has it)
CUDA_LIBRARIES = (
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libnvrtc.so.13",
    "libcurand.so.10",
    "libcufft.so.12",
    "libcudart.so.13",
    "libcudnn.so.9",
)


def nvidia_library_dirs() -> list[str]:
    """The lib folders of the nvidia-* wheels (CUDA, cuBLAS, cuDNN...) anywhere on sys.path: CUDA 13's wheels
    share `nvidia/cu13/lib`, older ones have a folder each (`nvidia/cublas/lib`), cuDNN has `nvidia/cudnn/lib`."""
    found: list[str] = []
    for entry in dict.fromkeys(sys.path):
        root = Path(entry or ".") / "nvidia"
        if root.is_dir():
            found += [str(d) for d in sorted(root.glob("*/lib")) if d.is_dir()]
    return list(dict.fromkeys(found))


def preload_cuda() -> list[str]:
    """Load CUDA and cuDNN from the nvidia-* wheels before the first CUDA session: the GPU wheel's provider
    library finds them no other way unless LD_LIBRARY_PATH names them. Each library ONNX Runtime wants is
    loaded from the first wheel folder on sys.path that has it (the wheels may sit apart from onnxruntime,
    installed with --target, say), then ONNX Runtime's own `preload_dlls` (>= 1.21) does the rest.
    Returns one line per library that failed to load, and what `preload_dlls` printed."""
    notes: list[str] = []
    try:
        wanted = [p[-1] for p in ort._get_nvidia_dll_paths(False, True, True)]  # the runtime's own list
    except Exception:
        wanted = list(CUDA_LIBRARIES)
    dirs = nvidia_library_dirs()
    for name in wanted:
        path = next((Path(d) / name for d in dirs if (Path(d) / name).is_file()), None)
        if path is None:
            continue
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            notes.append(f"{path}: {e}")
    if not hasattr(ort, "preload_dlls"):
        return [*notes, f"onnxruntime {ort.__version__} has no preload_dlls (older than 1.21)"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            ort.preload_dlls()
        except Exception as e:  # a runtime without CUDA, or a layout it does not know: the loads above stand
            print(f"preload_dlls: {type(e).__name__}: {e}")
    return notes + [line for line in out.getvalue().splitlines() if line.strip()]


def providers(use_cuda: bool) -> list[str]:
    """The execution providers of a session: CUDA with the CPU as fallback, or the CPU alone."""
    return ["CUDAExecutionProvider", "CPUExecutionProvider"] if use_cuda else ["CPUExecutionProvider"]


def session_options(threads: int | None = None, spin: bool = False) -> ort.SessionOptions:
    """The options of every session the project makes: `threads` intra-op threads (None: ONNX Runtime's
    default), one inter-op thread, operators in sequence, every graph optimisation, errors only in the log."""
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # errors only: keep CUDA fallback noise out of a CPU user's face
    # ONNX Runtime's worker threads spin between operators by default. On a shared or
    # CPU-quota'd machine that burns the cores the other threads need: with 2 threads on a
    # busy 2-core machine decoding ran 3x slower spinning (benchmarks/HISTORY.md, "Threads, and ONNX Runtime's
    # spinning threads"). Off unless asked.
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "1" if spin else "0")
    return so


# ---- the decode step's calls: one adapter over ONNX Runtime's private fast path and its public API ----------
# The first ONNX Runtime minor version of the 1.x series whose private step API (InferenceSession._sess's
# run_with_ort_values / run_with_iobinding, IOBinding._iobinding, the C module's OrtValue.ortvalue_from_numpy
# and OrtDevice) the decode step was tested on: onnxruntime-gpu 1.31.1 and onnxruntime 1.32 (the gpu and cpu
# extras). Later 1.x versions use it while those names exist; any other version uses the public API.
PRIVATE_API_SINCE = (1, 31)


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "1.32.0" or "1.33.0rc1"; (0, 0) when it has none."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def private_step_api(version: str | None = None) -> bool:
    """Whether the decode step may call ONNX Runtime's C++ session directly: a 1.x version from
    PRIVATE_API_SINCE on, whose private names are all there. Otherwise the public API (slower per step)."""
    v = _version(version or ort.__version__)
    if v[0] != PRIVATE_API_SINCE[0] or v < PRIVATE_API_SINCE:
        return False
    if C is None or not hasattr(C, "OrtDevice") or not hasattr(getattr(C, "OrtValue", None), "ortvalue_from_numpy"):
        return False
    session_c = getattr(C, "InferenceSession", None)
    binding_c = getattr(C, "SessionIOBinding", None)
    return all(hasattr(session_c, m) for m in ("run_with_ort_values", "run_with_iobinding")) and binding_c is not None


PRIVATE_STEP_API = private_step_api()  # decided once per process; a test may set it False to run the fallback
if not PRIVATE_STEP_API:
    log.info("ONNX Runtime %s: the decode step uses the public API (its private fast path is not known here)", ort.__version__)


class StepCalls:
    """How the decode step calls one session.

    - `run_with_values(feeds, output_names, run_options)`: feeds `{name: value made by OrtValues.input}`;
      returns the outputs as values with `.numpy()` that the next step may feed back.
    - `run_with_binding(handle, run_options)`: runs an IOBinding given as `binding_handle(io_binding)`.

    With the private API these are the C++ session's own calls, without the Python wrapper's per-call checks
    and per-output wrapping (the public `run_with_ort_values` is this call plus those): a CPU step's one call.
    """

    def __init__(self, session: ort.InferenceSession, private: bool | None = None):
        self.private = PRIVATE_STEP_API if private is None else private
        if self.private:
            self.run_with_values = session._sess.run_with_ort_values
            self.run_with_binding = session._sess.run_with_iobinding
        else:
            self.run_with_values = lambda feeds, output_names, run_options=None: session.run_with_ort_values(
                output_names, feeds, run_options
            )
            self.run_with_binding = session.run_with_iobinding

    def binding_handle(self, io_binding: ort.IOBinding):
        """What `run_with_binding` takes for `io_binding`: its C binding, or the binding itself."""
        return io_binding._iobinding if self.private else io_binding

    def pointer_binders(self, io_binding: ort.IOBinding, device: str) -> tuple[Callable, Callable]:
        """`(bind_input, bind_output)` for `io_binding`, each `(name, element_type, shape, pointer)`: a buffer on
        `device` bound by its address. On CPU with the private API they are the C binding's own calls with one
        device object made here, where the Python wrapper makes a device object per call: a batch binds every
        cache, cross K/V and host buffer again whenever its row count changes, most steps of a busy server."""
        if self.private and device == "cpu":
            c_binding = io_binding._iobinding
            c_device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
            return (
                lambda name, element_type, shape, pointer: c_binding.bind_input(name, c_device, element_type, shape, pointer),
                lambda name, element_type, shape, pointer: c_binding.bind_output(name, c_device, element_type, shape, pointer),
            )
        return (
            lambda name, element_type, shape, pointer: io_binding.bind_input(name, device, 0, element_type, shape, pointer),
            lambda name, element_type, shape, pointer: io_binding.bind_output(name, device, 0, element_type, shape, pointer),
        )


class OrtValues:
    """Makes the OrtValues a decode step feeds, on `device` ("cpu" or "cuda").

    `input(array)`: a decoder input (the cache, the mask) in the form the step feeds it: on CPU the C
    value the private `run_with_ort_values` takes (the Python value under the public API), on a device the
    Python value an IOBinding binds. Either shares the array's memory on CPU, so the array must outlive it.
    """

    def __init__(self, device: str, private: bool | None = None):
        self.device = device
        private = PRIVATE_STEP_API if private is None else private
        if device == "cpu" and private:
            self._cpu_device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
            # what a step feeds, chosen once: the call is made for the mask at every step
            self.input = self._c_value
        else:
            self.input = self.value

    def value(self, array: np.ndarray) -> ort.OrtValue:
        """The Python OrtValue of `array` on the device: what an IOBinding binds."""
        return ort.OrtValue.ortvalue_from_numpy(array, self.device, 0)

    def _c_value(self, array: np.ndarray):
        """On CPU, the C value that the session's `run_with_ort_values` takes and returns, sharing the array's
        memory, made directly: the Python wrapper builds a device object per call (1.0 vs 2.9 us)."""
        return C.OrtValue.ortvalue_from_numpy(array, self._cpu_device)


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
