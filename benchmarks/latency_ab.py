"""Latency and streamed throughput of two checkouts' servers, A B A B on one machine.

    .venv/bin/python -m benchmarks.latency_ab --a CHECKOUT [--b CHECKOUT] [--rounds 2]
        [--engine-bench REPORT.json] [--out DIR]

Each round serves the default model from checkout A, then from B (each its own `models/g2p-en` when it has
one; `attnserve-serve --threads 1`, max batch 32, on core 0), and drives it with this checkout's
`attnserve-loadtest` on core 1 over the same out-of-dictionary pseudo-words (`lexicon: false`, streamed on `/generate_stream`):
- 1 client: time to first token, p50 (`--c1-requests` measured requests);
- 32 clients: inter-token latency p99, TTFT p50 and p99, and output tokens/s (`--c32-requests`).
With `--engine-bench`, an attnserve-bench report holding the ort-int8 batch-32 8-token cell, the 32-client
output tokens/s is also given as a share of the engine's own tokens/s in that cell (32 tokens per step over
`ms_per_step`). Writes DIR/latency_ab_TIME.json and prints one row per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.http_overhead import BIN, ROOT, checkout_name, portable_args, pseudo_words, start_server
from benchmarks.measure import machine, write_report


def loadtest(url: str, words_file: Path, clients: int, requests: int, out: Path) -> dict:
    cmd = ["taskset", "-c", "1", str(BIN / "attnserve-loadtest"), url, "--concurrency", str(clients)]
    cmd += ["--requests", str(requests), "--warmup", str(max(clients, 10)), "--input", str(words_file), "--out", str(out)]
    cmd += ["--no-plots", "--no-records", "--no-progress"]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"attnserve-loadtest failed: {done.stderr[-500:]}")
    return json.loads((out / "results.json").read_text())["levels"][0]["summary"]


def one_run(label: str, repo: Path, words_file: Path, args, tmp: Path) -> dict:
    own = repo / "models/g2p-en"  # each checkout's own default model when it has one: a change to the bundle counts too
    proc, url = start_server(repo, 32, own if own.is_dir() else None)
    try:
        c1 = loadtest(url, words_file, 1, args.c1_requests, tmp / f"{label}_c1")
        c32 = loadtest(url, words_file, 32, args.c32_requests, tmp / f"{label}_c32")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    failed = c1["failed"] + c32["failed"]
    if failed:
        raise RuntimeError(f"{label}: {failed} requests failed")
    return {
        "label": label,
        "server": checkout_name(repo),
        "c1_ttft_p50_ms": c1["ttft_ms"]["p50"],
        "c32_itl_p99_ms": c32["itl_ms"]["p99"],
        "c32_ttft_p50_ms": c32["ttft_ms"]["p50"],
        "c32_ttft_p99_ms": c32["ttft_ms"]["p99"],
        "c32_output_tokens_per_s": c32["output_tokens_per_s"],
        "load_average": os.getloadavg()[0],
    }


def engine_tokens_per_s(report: Path) -> float:
    cells = json.loads(report.read_text())["results"]
    cell = next(c for c in cells if c["backend"] == "ort-int8" and c["batch"] == 32 and c["output_len"] == 8)
    return 32 * 1000 / cell["ms_per_step"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="checkout A (the server before)")
    ap.add_argument("--b", type=Path, default=ROOT, help="checkout B (default: this one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--words", type=int, default=600)
    ap.add_argument("--c1-requests", type=int, default=300)
    ap.add_argument("--c32-requests", type=int, default=3000)
    ap.add_argument("--engine-bench", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/serving_tax")
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        ap.error("needs cores 0 and 1")
    tmp = Path(tempfile.mkdtemp(prefix="latency_ab_"))
    words_file = tmp / "words.txt"
    words_file.write_text("\n".join(pseudo_words(args.words)) + "\n")
    engine = engine_tokens_per_s(args.engine_bench) if args.engine_bench else None
    runs = []
    for r in range(1, args.rounds + 1):
        for name, repo in (("A", args.a), ("B", args.b)):
            run = one_run(f"{name}{r}", repo, words_file, args, tmp)
            if engine:
                run["c32_share_of_engine_tokens_per_s"] = run["c32_output_tokens_per_s"] / engine
            runs.append(run)
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in run.items()), flush=True)
    result = {"command": " ".join(["python -m benchmarks.latency_ab", *portable_args(sys.argv[1:])]), "machine": machine()}
    result |= {"engine_tokens_per_s": engine, "runs": runs}
    print(write_report(args.out, "latency_ab", result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
