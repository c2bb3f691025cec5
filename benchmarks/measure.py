"""What every script in benchmarks/ records beside its figures, and where it writes them.

Two sessions on the same kind of 2-core VM have had different CPUs (AMD EPYC with AVX-512 and VNNI in
one, AVX2 only in another), and int8 and attention kernels take different paths on each. So every report
names the CPU with the extensions that change those paths, and a figure is compared only with figures
taken on the same CPU.

    from benchmarks.measure import cpu_model, machine, write_report

`write_report` writes a script's raw JSON, named by the script and the time.
"""

from __future__ import annotations

import json
import os
import platform
import time
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


def write_report(out: Path, name: str, result: dict) -> Path:
    """`result` as OUT/NAME_TIME.json (the directory made if need be); returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}_{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
