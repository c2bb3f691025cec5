"""One-word request latency over HTTP, idle and while a 3,000-word text (every word read by the model, admitted in
chunks) is read, on a server of the default bundle with default settings (docs/TEXT.md, "Limits").

    .venv/bin/python -m benchmarks.text_interleave_latency [--out benchmarks/results/text]

Prints the figures and writes them, with the machine, to OUT/text_interleave_latency_TIME.json.
"""

import argparse
import random
import sys
import threading
import time
from pathlib import Path

import httpx

from benchmarks.http_overhead import serve
from benchmarks.measure import machine, write_report

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "models" / "g2p-en"
rng = random.Random(0)
words = [
    "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(2)) + rng.choice("bdgkmnpst") for _ in range(3000)
]
TEXT = " ".join(words)
ONE = {"inputs": "zorblat", "parameters": {"lexicon": False}}


def p(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    """Serve the default bundle (`attnserve-serve --threads 1`, every other setting its default) in a child process;
    print and write the one-word latencies idle and beside the long text, and the long text's own times."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "text")
    args = ap.parse_args()
    proc, url = serve(ROOT, [str(BUNDLE), "--threads", "1"])
    try:
        result = measure(url)
    finally:
        proc.kill()
        proc.wait()
    command = " ".join(["python -m benchmarks.text_interleave_latency", *sys.argv[1:]])
    result = {"command": command, "machine": machine(), **result}
    print(f"raw: {write_report(args.out, 'text_interleave_latency', result)}")


def summary(seconds: list[float]) -> dict:
    """n, p50 and p99 in ms of request times in seconds."""
    return {"n": len(seconds), "p50_ms": round(p(seconds, 0.5) * 1e3, 2), "p99_ms": round(p(seconds, 0.99) * 1e3, 2)}


def measure(url: str) -> dict:
    """The measurement against the server at `url`: {"idle", "busy": summary, "text_s": [seconds per reading]}."""
    with httpx.Client(timeout=120) as c:
        for _ in range(5):
            c.post(url + "/generate", json=ONE)
        idle = []
        for _ in range(100):
            t = time.perf_counter()
            r = c.post(url + "/generate", json=ONE)
            idle.append(time.perf_counter() - t)
            assert r.status_code == 200
        busy, done, rounds, text_s = [], threading.Event(), [0], []

        def reader():
            try:
                with httpx.Client(timeout=300) as c2:
                    while rounds[0] < 3:
                        t = time.perf_counter()
                        r = c2.post(url + "/generate", json={"inputs": TEXT, "parameters": {"lexicon": False}})
                        assert r.status_code == 200 and r.json()["generated_text"].count(" | ") == 2999, r.text[:200]
                        text_s.append(time.perf_counter() - t)
                        rounds[0] += 1
            finally:
                done.set()

        th = threading.Thread(target=reader)
        th.start()
        time.sleep(0.2)
        while not done.is_set() and len(busy) < 2000:
            t = time.perf_counter()
            r = c.post(url + "/generate", json=ONE)
            busy.append(time.perf_counter() - t)
            assert r.status_code == 200
        th.join()
        print(f"idle  n={len(idle)} p50={p(idle, 0.5) * 1e3:.1f} ms p99={p(idle, 0.99) * 1e3:.1f} ms")
        print(f"busy  n={len(busy)} p50={p(busy, 0.5) * 1e3:.1f} ms p99={p(busy, 0.99) * 1e3:.1f} ms")
        print("3,000-word text (model only):", ", ".join(f"{x:.2f} s" for x in text_s))
    return {"idle": summary(idle), "busy": summary(busy), "text_s": [round(x, 3) for x in text_s]}


if __name__ == "__main__":
    main()
