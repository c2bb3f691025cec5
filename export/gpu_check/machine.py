"""The machine step: the GPU, its driver, the CUDA and cuDNN libraries ONNX Runtime loaded, its version and providers."""

from __future__ import annotations

import contextlib
import io
import platform
import shutil
import subprocess
from importlib.metadata import distributions
from pathlib import Path


def step_machine(ctx: dict) -> dict:
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    import onnxruntime as ort

    from attnserve.service.engine.runtime import cpu_model, gpu_present, nvidia_library_dirs, preload_cuda

    info: dict = {
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "onnxruntime_file": ort.__file__,
        "available_providers": ort.get_available_providers(),
        "device": ort.get_device(),
        "build_info": getattr(ort, "get_build_info", lambda: None)(),
        "nvidia_wheels": nvidia_wheels(),
        "nvidia_library_dirs": nvidia_library_dirs(),
        "gpu_present": gpu_present(),
    }
    with contextlib.suppress(Exception):
        from onnxruntime.capi import onnxruntime_validation

        info["cuda_version_built_with"] = onnxruntime_validation.get_package_name_and_version_info()[2]
    info["nvidia_smi"] = nvidia_smi()
    failures = []
    if ctx["provider"] == "cuda":
        info["preload_dlls"] = preload_cuda()
        if "CUDAExecutionProvider" not in info["available_providers"]:
            failures.append(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (the GPU wheel is onnxruntime-gpu)")
        if not info["gpu_present"]:
            failures.append("no NVIDIA device found (/dev/nvidiactl, /proc/driver/nvidia/gpus)")
        out = io.StringIO()
        with contextlib.suppress(Exception), contextlib.redirect_stdout(out):
            ort.print_debug_info()
        info["onnxruntime_debug_info"] = out.getvalue().splitlines()
    info["loaded_libraries"] = loaded_libraries()
    return {**info, "failures": failures}


def nvidia_wheels() -> dict[str, str]:
    names = {}
    for dist in distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith(("nvidia-", "onnxruntime", "torch")):
            names[name] = dist.version
    return dict(sorted(names.items()))


def nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"present": False}
    try:
        q = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        head = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout.splitlines()[:4]
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"present": True, "error": str(e)}
    gpus = [
        dict(zip(("name", "driver", "memory", "compute_capability"), (x.strip() for x in ln.split(","))))
        for ln in q.stdout.splitlines()
    ]
    cuda = next((ln.split("CUDA Version:")[1].strip(" |") for ln in head if "CUDA Version:" in ln), None)
    return {"present": True, "gpus": gpus, "driver_cuda_version": cuda}


def loaded_libraries() -> list[str]:
    """The CUDA, cuBLAS, cuDNN and ONNX Runtime libraries this process has loaded (their file names carry versions)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    keys = ("libcudart", "libcublas", "libcudnn", "libcufft", "libcurand", "libnvrtc", "onnxruntime_providers", "libcuda.so")
    paths = {ln.split()[-1] for ln in maps.splitlines() if ln.count("/") and any(k in ln for k in keys)}
    return sorted(paths)
