"""What the cyclic garbage collector costs a server under load: collections per generation and their thread CPU.

    .venv/bin/python -m benchmarks.gc_cost [--server-repo CHECKOUT] [--route /generate_stream]
        [--clients 64] [--requests 6000]

Serves the default model from the checkout (`http_overhead.start_server`: core 0, `--threads 1`, max batch 32)
with a `sitecustomize` that times every collection (`gc.callbacks`, thread CPU) and writes the totals on SIGUSR1;
drives it with `http_overhead`'s lean client on core 1 (out-of-dictionary pseudo-words): one request per client
to warm up, then `--requests` measured ones. Prints, per generation, the collections and their CPU over the
measured requests, and the CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from benchmarks import http_overhead as h
from benchmarks.measure import signalled_totals

SITECUSTOMIZE = """
import gc, os, signal, time
_totals = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
_began = [0.0]
def _timed(phase, info):
    if phase == "start":
        _began[0] = time.thread_time()
    else:
        t = _totals[info["generation"]]
        t[0] += 1
        t[1] += time.thread_time() - _began[0]
gc.callbacks.append(_timed)
def _dump(*_):
    with open(os.environ["GC_COST_OUT"], "a") as f:
        f.write(repr({g: tuple(v) for g, v in _totals.items()}) + "\\n")
signal.signal(signal.SIGUSR1, _dump)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server-repo", type=Path, default=h.ROOT)
    p.add_argument("--route", default="/generate_stream")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=6000)
    args = p.parse_args()
    words = h.pseudo_words(600)
    with h.measured_server(args.server_repo, SITECUSTOMIZE, "GC_COST_OUT") as (proc, url, out):
        asyncio.run(h._closed_loop(url, args.route, words, "g2p-en", args.clients, args.clients))
        before = signalled_totals(out, proc.pid, 1)
        answered, failed = asyncio.run(h._closed_loop(url, args.route, words, "g2p-en", args.clients, args.requests))
        after = signalled_totals(out, proc.pid, 2)
    print(f"server: {h.checkout_name(args.server_repo)}; {args.route}, {args.clients} clients, {answered} answered", end="")
    print(f", {failed} failed")
    cpu = 0.0
    for gen in (0, 1, 2):
        n, s = after[gen][0] - before[gen][0], after[gen][1] - before[gen][1]
        cpu += s
        print(f"generation {gen}: {n} collections, {s * 1000:.1f} ms CPU" + (f" ({s / n * 1000:.2f} ms each)" if n else ""))
    print(f"collector CPU per request: {cpu / answered * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
