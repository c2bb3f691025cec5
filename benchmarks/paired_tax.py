"""Two checkouts' servers side by side, in short alternating blocks: the server CPU per request of each, and
the tax, on a machine too noisy for A B A B runs minutes apart.

    .venv/bin/python -m benchmarks.paired_tax --a CHECKOUT_A --b CHECKOUT_B [--rounds 12]
        [--block 600] [--routes /generate_stream,/v1/chat/completions,/generate] [--engine-bench REPORT.json]

Both servers serve the default model on the same core (0; `--threads 1`, max batch 32) for the whole run;
the load (`http_overhead.py`'s lean closed-loop client, 64 clients, out-of-dictionary pseudo-words) goes to one
at a time from core 1, in blocks of `--block` requests per route, A then B in odd rounds and B then A in even
ones. The idle server costs next to nothing, so a drift of the machine's speed hits both alike within a round.
Prints, per route, each side's median CPU per request (event loop / engine thread) and the median of the
rounds' B / A ratios; with `--engine-bench` (an attnserve-bench report holding the ort-int8 batch-32 8-token
cell), or `--bench` (that cell measured here on core 0 before the first round and after every round, while both
servers idle), also each side's median tax. With `--bench` each round's tax divides by the mean of the two bench
runs around it: the machine's speed moved by 40% within one run here, and a tax over one bench run taken minutes
away moves with it. Writes DIR/paired_tax_TIME.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from pathlib import Path

from benchmarks.http_overhead import (
    ROOT,
    _closed_loop,
    checkout_name,
    engine_cpu_per_step,
    mean_generated_tokens,
    portable_args,
    pseudo_words,
    start_server,
    thread_cpu_s,
)
from benchmarks.measure import machine, write_report


def block(url: str, pid: int, route: str, words: list[str], model: str, n: int) -> dict[str, float]:
    """n requests at 64 clients: the server's CPU per request, ms, in all and by thread."""
    before = thread_cpu_s(pid)
    asyncio.run(_closed_loop(url, route, words, model, 64, n))
    after = thread_cpu_s(pid)
    per = {k: (after[k] - before.get(k, 0.0)) / n * 1e3 for k in after}
    return {"total": sum(per.values()), **per}


def paired_rounds(args: argparse.Namespace, routes: list[str], words: list[str]) -> tuple[dict, list[float]]:
    """Servers A and B on core 0, this client on core 1: one warm-up block each, then `args.rounds` rounds of one
    block per route and server, A and B alternating first. Returns ({side: {route: [block]}}, the engine's
    cpu_ms_per_step before and after each round with --bench, else [])."""
    servers = {"A": start_server(args.a, 32), "B": start_server(args.b, 32)}
    runs: dict[str, dict[str, list[dict]]] = {side: {r: [] for r in routes} for side in servers}
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {1})
    try:
        for _, url in servers.values():  # warm-up, one block each
            for route in routes:
                asyncio.run(_closed_loop(url, route, words, "g2p-en", 64, 200))
        bench_steps = [engine_cpu_per_step(None)["cpu_ms_per_step"]] if args.bench else []  # on core 0, servers idle
        for i in range(args.rounds):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for route in routes:
                for side in order:
                    proc, url = servers[side]
                    runs[side][route].append(block(url, proc.pid, route, words, "g2p-en", args.block))
            if args.bench:
                bench_steps.append(engine_cpu_per_step(None)["cpu_ms_per_step"])
    finally:
        os.sched_setaffinity(0, affinity)
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)
    return runs, bench_steps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", type=Path, required=True, help="checkout A (its service/ is served)")
    p.add_argument("--b", type=Path, default=ROOT, help="checkout B (default: this one)")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--block", type=int, default=600, help="requests per route, server and round")
    p.add_argument("--routes", default="/generate_stream,/v1/chat/completions,/generate")
    p.add_argument("--engine-bench", type=Path, help="an attnserve-bench report with the ort-int8 batch-32 8-token cell")
    p.add_argument("--bench", action="store_true", help="measure the engine's cell here, before and after the rounds")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = p.parse_args()
    routes = args.routes.split(",")
    words = pseudo_words(600)
    runs, bench_steps = paired_rounds(args, routes, words)
    engine_ms = None
    per_round: list[float] = []  # the engine's CPU per word around each round (--bench)
    if args.engine_bench or args.bench:
        tokens = mean_generated_tokens(words) + 1
        if args.bench:
            per_round = [(x + y) / 2 / 32 * tokens for x, y in zip(bench_steps, bench_steps[1:])]
            engine_ms = statistics.median(per_round)
        else:
            bench_steps = [engine_cpu_per_step(args.engine_bench)["cpu_ms_per_step"]]
            engine_ms = bench_steps[0] / 32 * tokens
        print(f"engine CPU per word: {engine_ms:.3f} ms (bench ms per step: {', '.join(f'{x:.3f}' for x in bench_steps)})")
    summary = {}
    print(
        f"| route | A: ms per request (loop / engine) | B | B / A, median of {args.rounds} rounds |"
        + (" tax A | tax B |" if engine_ms else "")
    )
    print("|---|---|---|---|" + ("---|---|" if engine_ms else ""))
    for route in routes:
        med = {s: {k: statistics.median(b[k] for b in runs[s][route]) for k in ("total", "event_loop", "engine")} for s in runs}
        ratios = [b["total"] / a["total"] for a, b in zip(runs["A"][route], runs["B"][route])]
        summary[route] = {"median_ms": med, "b_over_a_median": statistics.median(ratios), "b_over_a": ratios}
        cells = [f"{med[s]['total']:.3f} ({med[s]['event_loop']:.3f} / {med[s]['engine']:.3f})" for s in ("A", "B")]
        line = f"| `{route}` | {cells[0]} | {cells[1]} | {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
        if per_round:  # each round's CPU per request over the bench around it
            taxes = {s: [b["total"] / e for b, e in zip(runs[s][route], per_round)] for s in runs}
            summary[route]["tax"] = {s: statistics.median(t) for s, t in taxes.items()}
            summary[route]["tax_per_round"] = taxes
            line += (
                " "
                + " | ".join(f"{statistics.median(taxes[s]):.2f} ({min(taxes[s]):.2f}-{max(taxes[s]):.2f})" for s in ("A", "B"))
                + " |"
            )
        elif engine_ms:
            summary[route]["tax"] = {s: med[s]["total"] / engine_ms for s in med}
            line += f" {med['A']['total'] / engine_ms:.2f} | {med['B']['total'] / engine_ms:.2f} |"
        print(line)
    result = {
        "command": " ".join(["python -m benchmarks.paired_tax", *portable_args(os.sys.argv[1:])]),
        "machine": machine(),
        "a": checkout_name(args.a),
        "b": checkout_name(args.b),
        "rounds": args.rounds,
        "block": args.block,
        "engine_cpu_ms_per_word": engine_ms,  # with --bench: the median over the rounds
        "engine_cpu_ms_per_word_per_round": per_round,
        "bench_ms_per_step": bench_steps if (args.bench or args.engine_bench) else None,
        "routes": summary,
        "runs": runs,
    }
    print(f"raw: {write_report(args.out, 'paired_tax', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
