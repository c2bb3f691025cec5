"""One client, one request at a time: HTTP against the same engine in-process, with the server's own step
metrics beside the client's wall time, so a gap can be placed (in the engine's steps, or around them).

    PYTHONPATH=$PWD .venv/bin/python docs/bench/http_one_client.py [--rounds 3] [--out docs/bench/http_one_client.json]

Each round: `attnserve-serve` on core 0 (`--threads 1`); a lean raw-socket client (http_overhead.LeanClient)
on core 1 sends the same 300 out-of-dictionary pseudo-words (`"lexicon": false`) to /generate, then to
/generate_stream, one after the other; `/metrics` is read before and after the /generate block. Then the
server stops and `service.client.Generator` (the server's engine and scheduler, in this process on core 0)
decodes the same words one at a time, its own metrics read alike. Times are means per request, in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_overhead import BIN, ROOT, LeanClient, pseudo_words  # noqa: E402

METRICS = ("time_to_first_token_seconds", "inference_duration_seconds", "decoder_step_duration_seconds")


def totals(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith(("_sum", "_count")) and any(m in s.name for m in METRICS):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def means_ms(before: dict, after: dict) -> dict[str, float]:
    """Mean of each histogram over the measured block, in ms."""
    out = {}
    for name in (n[: -len("_sum")] for n in before if n.endswith("_sum")):
        count = after[name + "_count"] - before[name + "_count"]
        out[name.split("attnserve_")[-1]] = round((after[name + "_sum"] - before[name + "_sum"]) / max(1.0, count) * 1000, 3)
    return out


def timed(fn, words: list[str]) -> float:
    t = time.perf_counter()
    for w in words:
        fn(w)
    return round((time.perf_counter() - t) / len(words) * 1000, 3)


def one_round(words: list[str], port: int) -> dict:
    cmd = ["taskset", "-c", "0", str(BIN / "attnserve-serve"), str(ROOT / "models/g2p-en"), "--threads", "1", "--port", str(port)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(url + "/ready", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        os.sched_setaffinity(0, {1})
        client = LeanClient(url)
        timed(lambda w: client.post("/generate", w), words[:30])
        before = totals(urllib.request.urlopen(url + "/metrics").read().decode())
        http = {"client_ms_per_generate": timed(lambda w: client.post("/generate", w), words)}
        http |= means_ms(before, totals(urllib.request.urlopen(url + "/metrics").read().decode()))
        http["client_ms_per_generate_stream"] = timed(lambda w: client.post("/generate_stream", w), words)
        client.close()
    finally:
        server.terminate()
        server.wait()
    from service.client import Generator

    os.sched_setaffinity(0, {0})  # the engine thread, started below, inherits it
    with Generator(ROOT / "models/g2p-en", threads=1) as g:
        timed(g.generate, words[:30])
        before = totals(generate_latest(g.metrics.registry).decode())
        in_process = {"client_ms_per_generate": timed(g.generate, words)}
        in_process |= means_ms(before, totals(generate_latest(g.metrics.registry).decode()))
    return {
        "http": http,
        "in_process": in_process,
        "generate_minus_in_process_ms": round(http["client_ms_per_generate"] - in_process["client_ms_per_generate"], 3),
        "stream_minus_in_process_ms": round(http["client_ms_per_generate_stream"] - in_process["client_ms_per_generate"], 3),
        "load_average": os.getloadavg()[0],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "docs/bench/http_one_client.json")
    args = p.parse_args()
    affinity = os.sched_getaffinity(0)
    words = pseudo_words(500, seed=21)[200:]
    rounds = []
    try:
        for r in range(args.rounds):
            rounds.append(one_round(words, 8170 + r))
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        os.sched_setaffinity(0, affinity)
    command = "docs/bench/http_one_client.py --rounds " + str(args.rounds)  # --out's path is this machine's
    args.out.write_text(json.dumps({"command": command, "words": len(words), "rounds": rounds}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
