"""Where the server's CPU goes while it streams: py-spy samples the server (on core 0, one ONNX
Runtime thread) while the lean closed-loop client of http_overhead.py (on core 1) keeps `--clients`
streams going on `--route` with out-of-dictionary pseudo-words.

    .venv/bin/python -m benchmarks.stream_profile [--clients 32] [--seconds 20] [--native] [--gil] [--out DIR]

Writes DIR/stream_profile_LABEL.txt (py-spy's raw collapsed stacks, all threads, idle samples left out) and
prints the top frames: by own time (the leaf of each sample) and by total time (any frame of the
sample), each as a share of the samples of the thread it ran in (event loop or engine thread).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.http_overhead import BIN, ROOT, _closed_loop, pseudo_words, start_server
from benchmarks.measure import cpu_model


def summary(raw: Path, top: int) -> str:
    """Top frames of py-spy's collapsed stacks (`thread;frame;frame... count`) by own and by total samples."""
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    total: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    samples: collections.Counter = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread = "engine thread" if "engine" in frames[0] or "runtime.py" in stack else "event loop"
        n = int(count)
        samples[thread] += n
        own[thread][frames[-1]] += n
        for f in set(frames[1:]):
            total[thread][f] += n
    out = []
    for thread in sorted(samples):
        out += [f"\n{thread}: {samples[thread]} samples", "", "| own % | total % | frame |", "|---|---|---|"]
        for f, n in own[thread].most_common(top):
            out.append(f"| {100 * n / samples[thread]:.1f} | {100 * total[thread][f] / samples[thread]:.1f} | `{f}` |")
        out += ["", "| total % | frame |", "|---|---|"]
        for f, n in total[thread].most_common(top):
            out.append(f"| {100 * n / samples[thread]:.1f} | `{f}` |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--route", default="/generate_stream")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--native", action="store_true", help="C frames too (py-spy pauses the server for each sample)")
    p.add_argument("--gil", action="store_true", help="only the samples of the thread holding the GIL")
    p.add_argument("--label", default="run")
    p.add_argument("--server-repo", type=Path, default=ROOT)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / f"stream_profile_{args.label}.txt"
    words = pseudo_words(600)
    proc, url = start_server(args.server_repo, 32)
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:  # the /v1 routes answer only the served model
            model = json.load(r)["data"][0]["id"]
        asyncio.run(_closed_loop(url, args.route, words, model, args.clients, 4 * args.clients))  # warm-up
        spy = subprocess.Popen(
            [str(BIN / "py-spy"), "record", "--pid", str(proc.pid), "--duration", str(args.seconds), "--format", "raw"]
            + ["--output", str(raw), "--threads", "--rate", "200"]
            + (["--native"] if args.native else ["--nonblocking"])
            + (["--gil"] if args.gil else []),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        stop = time.monotonic() + args.seconds + 3
        done = threading.Event()

        def drive() -> None:  # the client on core 1 until py-spy has finished
            import os

            os.sched_setaffinity(0, {1})
            while time.monotonic() < stop and not done.is_set():
                asyncio.run(_closed_loop(url, args.route, words, model, args.clients, 20 * args.clients))

        t = threading.Thread(target=drive)
        t.start()
        err = spy.communicate()[1]
        done.set()
        t.join()
        if spy.returncode:
            raise RuntimeError(f"py-spy failed: {err[-500:]!r}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(f"{cpu_model()}; {args.route}, {args.clients} clients, {args.seconds} s at 200 Hz" + summary(raw, args.top))
    print(f"\nraw: {raw}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
