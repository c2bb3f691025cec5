#!/usr/bin/env bash
# The CUDA path proven in one command, on a GPU host, from the source tree (no attnserve install).
#
#   cd <repository root> && OUT=/some/dir bash deploy/gpu/device_check.sh [BUNDLE]
#
# BUNDLE: the bundle to prove (default models/g2p-en); the check serves it its own samples (GET /samples).
# Expects the GPU wheels (docs/DEPLOY.md, "Offline GPU install": onnxruntime-gpu with its nvidia-* CUDA 13
# and cuDNN 9 wheels, onnx, and the base dependencies) installed into /tmp/site (pip install --target) or
# into the interpreter's own site-packages. Writes REPORTS/report.{json,md}, where REPORTS is $OUT/gpu-check when
# OUT is set (a folder the device machine sends back) and benchmarks/results/gpu otherwise (where docs/BENCHMARKS.md
# links the GPU reports); exits with the check's status (non-zero when any step failed).
set -u
BUNDLE="${1:-models/g2p-en}"
if [ ! -f "$BUNDLE/bundle.json" ]; then
  echo "error: $BUNDLE is not a model bundle (no bundle.json); usage: $0 [BUNDLE]" >&2
  exit 2
fi
REPORTS="${OUT:+$OUT/gpu-check}"
REPORTS="${REPORTS:-$PWD/benchmarks/results/gpu}"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$REPORTS"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
# what the check imports, and from where: a missing one is named here before anything runs
"$PYTHON" - <<'PY' || true
import importlib
for name in ("onnxruntime", "onnx", "numpy", "tokenizers", "fastapi", "uvicorn", "pydantic", "pydantic_settings",
             "prometheus_client", "orjson", "num2words", "torch"):
    try:
        m = importlib.import_module(name)
        print(f"{name:18s} {getattr(m, '__version__', '?'):14s} {getattr(m, '__file__', '')}")
    except Exception as e:  # torch is optional: its absence only skips the PyTorch bench column
        print(f"{name:18s} MISSING ({type(e).__name__}: {e})")
PY
timeout 600 "$PYTHON" -m attnserve.export.gpu_check --provider cuda --bundle "$BUNDLE" --out "$REPORTS"
rc=$?
echo "---- $REPORTS/report.md (exit status $rc)"
cat "$REPORTS/report.md" 2>/dev/null || echo "no report.md written"
exit $rc
