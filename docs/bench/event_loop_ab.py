"""The event loop's CPU per request, two server checkouts side by side (issue 14), on a 2-core machine.

    PYTHONPATH=$PWD .venv/bin/python docs/bench/event_loop_ab.py --server-repo-a OTHER_CHECKOUT [--rounds 5]

Both servers run at once on core 0 (`--threads 1`, the default model, log level info), each idle
while the other is measured; `attnserve-loadtest --concurrency 64` on core 1 drives one of them
at a time with the same out-of-dictionary pseudo-words (`"lexicon": false`), A B, then B A, round
after round, streamed and `--no-stream`. Each level's CPU is read per thread from
/proc/PID/task before and after: the engine thread (`attnserve-eng`), the main thread (the
event loop: what HTTP costs) and any other, over the requests answered. Medians over the rounds, so
the VM's drift, which is larger than the effects measured here, hits A and B alike.
Writes DIR/event_loop_ab_LABEL_TIME.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_overhead import (  # noqa: E402
    BIN,
    ROOT,
    LeanClient,
    _cpu_model,
    checkout_name,
    portable_args,
    pseudo_words,
    start_server,
    thread_cpu_s,
)


def level(url: str, pid: int, words: Path, requests: int, stream: bool, out: Path) -> dict:
    before = thread_cpu_s(pid)
    cmd = ["taskset", "-c", "1", str(BIN / "attnserve-loadtest"), url, "--concurrency", "64", "--requests", str(requests)]
    cmd += ["--warmup", "0", "--input", str(words), "--out", str(out), "--no-plots", "--no-records", "--no-progress"]
    cmd += ["--no-metrics"] + ([] if stream else ["--no-stream"])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = thread_cpu_s(pid)
    return {f"{k}_ms": (after[k] - before[k]) * 1000 / requests for k in ("event_loop", "engine", "other")}


def one_client(urls: dict[str, str], words: list[str], rounds: int, block: int = 40) -> dict:
    """p50 latency (ms) at one client: a lean kept-alive client on core 1 sends blocks of `block` words to A and
    to B in turn (A B, then B A), /generate then /generate_stream, the same words to both."""
    os.sched_setaffinity(0, {1})
    clients = {name: LeanClient(url) for name, url in urls.items()}
    times: dict[str, dict[str, list[float]]] = {name: {"/generate": [], "/generate_stream": []} for name in urls}
    for c in clients.values():
        for w in words[:20]:  # warm-up
            c.post("/generate", w)
    for r in range(rounds):
        chunk = words[20 + r * block : 20 + (r + 1) * block]
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            for path in ("/generate", "/generate_stream"):
                for w in chunk:
                    t0 = time.perf_counter()
                    clients[name].post(path, w)
                    times[name][path].append(time.perf_counter() - t0)
    for c in clients.values():
        c.close()
    return {name: {path: statistics.median(v) * 1000 for path, v in paths.items()} for name, paths in times.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-repo-a", type=Path, required=True, help="checkout A (e.g. a worktree of the base commit)")
    p.add_argument("--server-repo-b", type=Path, default=ROOT, help="checkout B (default: this one)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=2500, help="requests per level")
    p.add_argument("--out", type=Path, default=ROOT / "docs/bench")
    p.add_argument("--label", default="run")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="event_loop_ab_"))
    words = tmp / "words.txt"
    words.write_text("\n".join(pseudo_words(4000)) + "\n")
    servers = {"A": start_server(args.server_repo_a, 32), "B": start_server(args.server_repo_b, 32)}
    runs: dict[str, dict[str, list[dict]]] = {name: {"stream": [], "generate": []} for name in servers}
    loads = []
    try:
        for r in range(args.rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for mode in ("stream", "generate"):
                for name in order:
                    proc, url = servers[name]
                    runs[name][mode].append(level(url, proc.pid, words, args.requests, mode == "stream", tmp / "lt"))
            loads.append(list(Path("/proc/loadavg").read_text().split()[:3]))
        c1 = one_client({name: url for name, (_, url) in servers.items()}, pseudo_words(4000), 4 * args.rounds)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)

    summary = {
        name: {mode: {k: statistics.median(x[k] for x in v) for k in v[0]} for mode, v in modes.items()}
        for name, modes in runs.items()
    }
    result = {
        "label": args.label,
        "machine": f"{os.cpu_count()}-core {platform.machine()} " + _cpu_model(),
        "servers": {"A": checkout_name(args.server_repo_a), "B": checkout_name(args.server_repo_b)},
        "command": [("CHECKOUT" if a.startswith("/") else a) for a in portable_args(sys.argv)],
        "rounds": runs,
        "median": summary,
        "one_client_p50_ms": c1,
        "load_average_after_each_round": loads,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"event_loop_ab_{args.label}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.label}: {result['machine']}; A = {result['servers']['A']}, B = {result['servers']['B']}\n")
    print("| ms of CPU per request, 64 clients, median of rounds | A | B | B / A |")
    print("|---|---|---|---|")
    for mode, route in (("generate", "/generate"), ("stream", "/generate_stream")):
        for key, what in (("event_loop_ms", "event loop"), ("engine_ms", "engine thread"), ("other_ms", "other threads")):
            a, b = summary["A"][mode][key], summary["B"][mode][key]
            print(f"| {what}, {route} | {a:.2f} | {b:.2f} | {b / a if a else float('nan'):.2f} |")
    for route in ("/generate", "/generate_stream"):
        a, b = c1["A"][route], c1["B"][route]
        print(f"| one client, {route}: p50 latency (ms) | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    print(f"\nraw: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
