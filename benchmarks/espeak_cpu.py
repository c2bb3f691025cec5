"""What `alphabet: "espeak"` costs the server: its CPU time per request against `arpabet`, on one long text.

    python benchmarks/espeak_cpu.py [--bundle models/g2p-en] [--corpus /usr/share/vim/vim90/doc] [--words 2000] \\
        [--requests 20] [--out benchmarks/results/espeak_cpu.json]

Starts `attnserve-serve` on 127.0.0.1 (one thread, pinned to CPU 0 when the machine has two or more), warms it with
each alphabet, then sends the same text of `--words` words (the corpus's plain sentences, as
benchmarks/espeak_distance.py picks them) to POST /generate, alternating arpabet and espeak (A B A B) `--requests`
times each, one at a time. A request's cost is the server process's CPU time (every thread's, from
/proc/PID/task/*/schedstat, in nanoseconds) from before it is sent to after its answer has come back. The report
gives the median of each, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.espeak_distance import corpus_text, plain_sentences  # noqa: E402


def cpu_ns(pid: int) -> int:
    """A process's CPU time so far, all its threads, in nanoseconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended between listing and reading
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "g2p-en")
    p.add_argument("--corpus", type=Path, default=Path("/usr/share/vim/vim90/doc"))
    p.add_argument("--words", type=int, default=2000)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "espeak_cpu.json")
    args = p.parse_args(argv)
    words: list[str] = []
    for sentence in plain_sentences(corpus_text(args.corpus), 10_000):
        words += sentence.split()
        if len(words) >= args.words:
            break
    text = " ".join(words[: args.words])
    port = free_port()
    env = {**os.environ, "ATTNSERVE_PORT": str(port), "ATTNSERVE_THREADS": "1", "ATTNSERVE_LOG_LEVEL": "warning"}
    serve = [str(Path(sys.executable).with_name("attnserve-serve")), str(args.bundle)]
    if (os.cpu_count() or 1) >= 2:
        serve = ["taskset", "-c", "0", *serve]
        os.sched_setaffinity(0, {1})  # this client on the other core
    server = subprocess.Popen(serve, env=env)
    url = f"http://127.0.0.1:{port}"
    samples: dict[str, list[int]] = {"arpabet": [], "espeak": []}
    try:
        with httpx.Client(timeout=120) as client:
            for _ in range(600):
                try:
                    if client.get(url + "/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            else:
                raise SystemExit("the server did not become ready")

            def one(alphabet: str) -> int:
                before = cpu_ns(server.pid)
                r = client.post(url + "/generate", json={"inputs": text, "parameters": {"alphabet": alphabet}})
                r.raise_for_status()
                return cpu_ns(server.pid) - before

            for alphabet in samples:  # warm-up: the lexicon's pages, the model's words, the espeak table's cache
                one(alphabet)
            for _ in range(args.requests):
                for alphabet in samples:
                    samples[alphabet].append(one(alphabet))
    finally:
        server.terminate()
        server.wait(30)
    medians = {a: statistics.median(s) / 1e6 for a, s in samples.items()}
    report = {
        "command": "python benchmarks/espeak_cpu.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "words": len(text.split()),
        "requests_each": args.requests,
        "median_cpu_ms": {a: round(m, 2) for a, m in medians.items()},
        "espeak_over_arpabet": round(medians["espeak"] / medians["arpabet"], 4),
        "samples_cpu_ms": {a: [round(x / 1e6, 2) for x in s] for a, s in samples.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("cpu", "words", "median_cpu_ms", "espeak_over_arpabet")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
