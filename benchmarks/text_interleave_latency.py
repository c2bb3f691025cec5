"""One-word request latency over HTTP, idle and while a 3,000-word text (every word read by the model, admitted in
chunks) is read, on a server of the default bundle with default settings (docs/TEXT.md, "Limits").

    .venv/bin/python -m benchmarks.text_interleave_latency
"""

import random
import threading
import time
from pathlib import Path

import httpx

from benchmarks.http_overhead import serve

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
    """Serve the default bundle (`attnserve-serve --threads 1`, every other setting its default) in a child process
    and print the one-word latencies idle and beside the long text, and the long text's own times."""
    proc, url = serve(ROOT, [str(BUNDLE), "--threads", "1"])
    try:
        measure(url)
    finally:
        proc.kill()
        proc.wait()


def measure(url: str) -> None:
    """The measurement against the server at `url`."""
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


if __name__ == "__main__":
    main()
