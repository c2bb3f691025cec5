"""`attnserve-gpu-check`: its flags, the step runner (each step in its own time bound, every failure recorded and
the next step run anyway), and report.json/report.md."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from attnserve.export.gpu_check.bench import BATCHES, LENGTHS, step_bench
from attnserve.export.gpu_check.machine import loaded_libraries, step_machine
from attnserve.export.gpu_check.report import markdown
from attnserve.export.gpu_check.serve import SERVE_WORDS, step_serve
from attnserve.export.gpu_check.verify import step_variant, step_verify

STEPS = ("machine", "variant", "verify", "bench", "serve")
# seconds each step may take: on a GPU host (device time is short) and on a CPU (CI's shared 2-core machines)
STEP_LIMIT_S = {
    "cuda": {"machine": 45, "variant": 100, "verify": 90, "bench": 90, "serve": 90},
    "cpu": {"machine": 60, "variant": 240, "verify": 240, "bench": 240, "serve": 180},
}


def run_step(fn, ctx: dict, limit_s: float) -> dict:
    """`fn(ctx)` in a daemon thread, at most `limit_s` seconds: {"ok", "seconds", "result" | "error"}. A step that
    overruns is recorded as failed and left behind (the process exits when the report is written)."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn(ctx)
        except BaseException as e:  # every failure is recorded, none stops the next step
            box["error"] = f"{type(e).__name__}: {e}".strip()
            box["traceback"] = traceback.format_exc()[-4000:]

    t0 = time.perf_counter()
    thread = threading.Thread(target=target, name=f"gpu-check-{fn.__name__}", daemon=True)
    thread.start()
    thread.join(limit_s)
    out: dict = {"seconds": round(time.perf_counter() - t0, 1), "limit_s": limit_s}
    if thread.is_alive():
        out.update(ok=False, error=f"did not finish within {limit_s} s")
        if ctx.get("partial", {}).get(fn.__name__.removeprefix("step_")):
            out["partial"] = ctx["partial"][fn.__name__.removeprefix("step_")]
    elif "error" in box:
        out.update(ok=False, error=box["error"], traceback=box["traceback"])
    else:
        result = box.get("result") or {}
        failures = result.pop("failures", [])
        out.update(ok=not failures, result=result)
        if failures:
            out["failures"] = failures
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="attnserve-gpu-check", description="Prove the CUDA path end to end (report.json, report.md)."
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("benchmarks/results/gpu"),
        help="report folder (default benchmarks/results/gpu, beside the reports docs/BENCHMARKS.md links)",
    )
    p.add_argument("--bundle", type=Path, default=Path("models/g2p-en"), help="the bundle (copied; never changed)")
    p.add_argument("--provider", choices=["cuda", "cpu"], default="cuda", help="cpu: the dry run on the int8 and fp32 variants")
    p.add_argument("--steps", default=",".join(STEPS), help=f"subset of {','.join(STEPS)}")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)), help="bench batch sizes")
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="bench output lengths (capped at max_target_len)")
    p.add_argument("--repeats", type=int, help="bench runs per cell (default 3 on cuda, 1 on cpu)")
    p.add_argument("--serve-words", type=int, default=SERVE_WORDS, help="serve-step inputs (GET /samples)")
    p.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: the CPUs this process may use)")
    p.add_argument(
        "--keep-bundle",
        type=Path,
        help="write the bundle copy with the fp16 variant here and keep it (default: a temporary folder, removed)",
    )
    args = p.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        print(f"error: unknown step(s) {unknown}; choose from {', '.join(STEPS)}", file=sys.stderr)
        return 2
    if not (args.bundle / "bundle.json").is_file():
        print(f"error: {args.bundle} is not a model bundle (no bundle.json)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = {
        "out": args.out.resolve(),
        # the bundle copy stays out of --out, which holds only the reports and the server's log
        "work": args.keep_bundle.resolve() if args.keep_bundle else Path(tempfile.mkdtemp(prefix="attnserve-gpu-check-")),
        "bundle": args.bundle.resolve(),
        "provider": args.provider,
        "threads": args.threads,
        "batches": [int(x) for x in args.batches.split(",")],
        "lengths": [int(x) for x in args.lengths.split(",")],
        "repeats": args.repeats or (3 if args.provider == "cuda" else 1),
        "serve_words": args.serve_words,
    }
    t0 = time.perf_counter()
    report = {
        "command": "attnserve-gpu-check " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provider": args.provider,
        "bundle": str(args.bundle),
        "steps": {},
    }
    fns = {"machine": step_machine, "variant": step_variant, "verify": step_verify, "bench": step_bench, "serve": step_serve}
    for name in steps:
        _log(f"[gpu-check] {name} ...")
        report["steps"][name] = run_step(fns[name], ctx, STEP_LIMIT_S[args.provider][name])
        s = report["steps"][name]
        why = s.get("error") or s.get("failures") or ""
        _log(f"[gpu-check] {name}: {'ok' if s['ok'] else 'FAILED'} in {s['seconds']} s {why}")
    if "machine" in report["steps"] and report["steps"]["machine"].get("result"):
        report["steps"]["machine"]["result"]["loaded_libraries"] = loaded_libraries()  # after the CUDA sessions
    report["failures"] = [
        f"{n}: {f}" for n, s in report["steps"].items() for f in (s.get("failures") or [s.get("error")] if not s["ok"] else [])
    ]
    report["passed"] = not report["failures"]
    report["seconds"] = round(time.perf_counter() - t0, 1)
    (args.out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.out / "report.md").write_text(markdown(report))
    if not args.keep_bundle:
        shutil.rmtree(ctx["work"], ignore_errors=True)
    _log(f"[gpu-check] {'passed' if report['passed'] else 'FAILED'} in {report['seconds']} s: {args.out / 'report.md'}")
    return 0 if report["passed"] else 1


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
