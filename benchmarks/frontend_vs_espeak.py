"""The text front end against espeak-ng: one 2,000-word news-style text, one client, one core each.

    python -m benchmarks.frontend_vs_espeak                                      # this tree
    python -m benchmarks.frontend_vs_espeak --tree after=. --tree before=../main   # two trees, in one run

Each tree's server (`python -m attnserve.service BUNDLE --threads 1`, with that tree first on PYTHONPATH) runs pinned to
core 0 (taskset); this script, the client, pins itself to core 1 and sends the text (benchmarks/data/news_2000.txt:
prose, numbers, dates, money, names, a URL and an e-mail address) as one `POST /generate` with default parameters.
espeak-ng (`piper_phonemize.phonemize_espeak(text, "en-us")`, PyPI `piper-phonemize`: the phonemizer most open TTS
systems call) runs in a worker process pinned to core 0 too, so both are timed on the same core. After a warm-up,
the rounds go A B ... espeak, A B ... espeak, so a busy machine slows all of them alike; the figure is each one's
best of `--repeats` and the ratio of the bests. The raw JSON (every time, the machine, whether the trees answered
alike) goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.measure import machine, write_report

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "benchmarks" / "data" / "news_2000.txt"
RESULTS = ROOT / "benchmarks" / "results"
SERVER_CORE, CLIENT_CORE = 0, 1

# the espeak-ng worker: one timing per line read on stdin, its seconds written back
ESPEAK_WORKER = """
import sys, time
from piper_phonemize import phonemize_espeak
text = open(sys.argv[1], encoding="utf-8").read()
for _ in sys.stdin:
    t = time.perf_counter()
    phonemize_espeak(text, "en-us")
    print(time.perf_counter() - t, flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tree: Path, bundle: Path) -> tuple[subprocess.Popen, int]:
    """A server of `tree`'s code pinned to the server core, once it answers /ready."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree), "ATTNSERVE_LOG_LEVEL": "warning"}
    cmd = ["taskset", "-c", str(SERVER_CORE), sys.executable, "-m", "attnserve.service", str(bundle)]
    cmd += ["--port", str(port), "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"the server of {tree} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/ready")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the server of {tree} did not start")


class Client:
    """One keep-alive connection; `post` times one /generate of the text, answer read whole."""

    def __init__(self, port: int, text: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.body = json.dumps({"inputs": text}).encode()
        self.headers = {"content-type": "application/json"}

    def post(self) -> tuple[float, str]:
        t = time.perf_counter()
        self.conn.request("POST", "/generate", self.body, self.headers)
        r = self.conn.getresponse()
        data = r.read()
        took = time.perf_counter() - t
        if r.status != 200:
            raise RuntimeError(f"/generate answered {r.status}: {data[:300]!r}")
        return took, json.loads(data)["generated_text"]


def git_commit(tree: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return out.stdout.strip() or None
    except OSError:
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", help="LABEL=PATH of a source tree to serve (default: this one, 'this')")
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "g2p-en")
    p.add_argument("--text", type=Path, default=TEXT)
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (the figure is the best)")
    p.add_argument("--warm-up", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS, help="directory of the raw JSON (frontend_vs_espeak_TIME.json)")
    args = p.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else {"this": str(ROOT)}
    text = args.text.read_text(encoding="utf-8")
    os.sched_setaffinity(0, {CLIENT_CORE})

    servers, clients = {}, {}
    espeak = subprocess.Popen(
        ["taskset", "-c", str(SERVER_CORE), sys.executable, "-c", ESPEAK_WORKER, str(args.text)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def espeak_once() -> float:
        espeak.stdin.write("go\n")
        espeak.stdin.flush()
        return float(espeak.stdout.readline())

    try:
        for label, path in trees.items():
            servers[label] = start_server(Path(path).resolve(), args.bundle.resolve())
            clients[label] = Client(servers[label][1], text)
        answers = {}
        for _ in range(args.warm_up):
            for label, c in clients.items():
                answers[label] = c.post()[1]
            espeak_once()
        times: dict[str, list[float]] = {label: [] for label in trees} | {"espeak-ng": []}
        for _ in range(args.repeats):
            for label, c in clients.items():
                times[label].append(c.post()[0])
            times["espeak-ng"].append(espeak_once())
    finally:
        espeak.kill()
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)

    best = {label: min(ts) for label, ts in times.items()}
    report = {
        "what": "POST /generate of one 2,000-word news-style text at one client (server --threads 1 on core 0, client "
        "on core 1) against piper_phonemize.phonemize_espeak(text, 'en-us') on core 0; best of the repeats",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine_after": machine(),
        "text": str(args.text.relative_to(ROOT) if args.text.is_relative_to(ROOT) else args.text),
        "text_words": len(text.split()),
        "answer_words": {label: a.count(" | ") + 1 for label, a in answers.items()},
        "same_answer": len(set(answers.values())) == 1,  # every tree's generated_text alike
        # each tree by its commit: where it lay on this machine means nothing elsewhere
        "trees": {label: {"commit": git_commit(Path(path))} for label, path in trees.items()},
        "times_s": times,
        "best_ms": {label: round(b * 1000, 2) for label, b in best.items()},
        "ratio_to_espeak": {label: round(best[label] / best["espeak-ng"], 2) for label in trees},
    }
    out = write_report(args.out, "frontend_vs_espeak", report)
    print(json.dumps({k: report[k] for k in ("best_ms", "ratio_to_espeak", "same_answer")}, indent=2))
    print(f"raw: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
