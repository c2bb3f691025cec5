"""Server CPU per request with the context stage on and off, A B A B (docs/BENCHMARKS.md, "Heteronyms").

Two servers of the default model run side by side, pinned to core 0: A as shipped (the context component on),
B with `ATTNSERVE_CONTEXT=false` (each heteronym reads as the lexicon's first entry, as a bundle without the
component does). A client on core 1 sends one sentence at a time over a kept-alive connection, in blocks of
`--requests`, alternating A, B, A, B, ... for `--rounds` rounds; each block's server CPU (user + system, from
/proc/PID/stat) is divided by its requests. Two sentences of 20 words, every word in the dictionary (so the
engine does no work and the figure is the text layer's and HTTP's): one with one heteronym, one with none.

    .venv/bin/python -m benchmarks.context_cpu --out benchmarks/results/context_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.measure import machine

ROOT = Path(__file__).resolve().parents[1]
WITH_HOMOGRAPH = "After the long meeting in the old town hall we will read the new report to all of the people"
WITHOUT = "After the long meeting in the old town hall we will study the new report with all of the people"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(context: bool) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "ATTNSERVE_CONTEXT": "true" if context else "false", "ATTNSERVE_LOG_LEVEL": "warning"}
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "attnserve.service", str(ROOT / "models" / "g2p-en"), "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--threads", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def block(client: httpx.Client, pid: int, text: str, n: int) -> float:
    """Server CPU milliseconds per request over `n` requests."""
    body = {"inputs": text}
    before = cpu_seconds(pid)
    for _ in range(n):
        r = client.post("/generate", json=body)
        r.raise_for_status()
    return 1000 * (cpu_seconds(pid) - before) / n


def in_process(rounds: int, n: int) -> dict:
    """The request layer alone: CPU seconds of `RequestLayer.admit` (read, look up, choose) per sentence, context
    asked for (on) or not (off) in the same process, A B A B; no HTTP, so far less noise than the servers'."""
    from attnserve.service.client import Generator
    from attnserve.service.requests.validation import validate

    gen = Generator(ROOT / "models" / "g2p-en", threads=1)
    out: dict = {}
    try:
        for name, text in (("one heteronym", WITH_HOMOGRAPH), ("no heteronym", WITHOUT)):
            ms = {"on": [], "off": []}
            for _ in range(rounds):
                for k in ("on", "off"):
                    request = gen.request(text, context=k == "on", token_text=False)
                    t = time.thread_time()
                    for _ in range(n):
                        gen.requests.admit(validate(gen.requests, request)).wait()
                    ms[k].append(round(1000 * (time.thread_time() - t) / n, 4))
            out[name] = {
                **{f"{k}_ms": v for k, v in ms.items()},
                "on_minus_off_ms": [round(a - b, 4) for a, b in zip(ms["on"], ms["off"])],
            }
    finally:
        gen.close()
    return out


def stage_alone(repeats: int = 7, n: int = 2000) -> dict:
    """The context stage's own work, timed alone (the least of `repeats` runs of `n` calls, microseconds): what a
    sentence without a covered word adds (one membership test per word) and what one covered word adds (its
    features, its model and the reordering of its lexicon answers)."""
    import timeit

    from attnserve.service.text.context import ContextChooser, rank_by_context
    from attnserve.service.text.lexicon import LexiconAnswer

    chooser = ContextChooser.load(ROOT / "models" / "g2p-en" / "context.json.gz")
    words = WITHOUT.lower().split()
    start = WITH_HOMOGRAPH.index(" read ") + 1
    found = [LexiconAnswer("R EH1 D", (1,)), LexiconAnswer("R IY1 D", (2,))]

    def per_call(fn) -> float:
        return round(1e6 * min(timeit.repeat(fn, number=n, repeat=repeats)) / n, 3)

    return {
        "covers_20_words_us": per_call(lambda: [chooser.covers(w.lower()) for w in words]),
        "one_covered_word_us": per_call(lambda: rank_by_context(chooser, "read", found, WITH_HOMOGRAPH, start, start + 4)),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    os.sched_setaffinity(0, {1})
    servers = {"on": start(True), "off": start(False)}
    try:
        clients = {k: httpx.Client(base_url=url, timeout=60) for k, (_, url) in servers.items()}
        answers = {k: c.post("/generate", json={"inputs": WITH_HOMOGRAPH}).json()["generated_text"] for k, c in clients.items()}
        rows = []
        for r in range(args.rounds):
            for name, text in (("one heteronym", WITH_HOMOGRAPH), ("no heteronym", WITHOUT)):
                for k in ("on", "off"):  # A B, then the next round A B again
                    ms = block(clients[k], servers[k][0].pid, text, args.requests)
                    rows.append({"round": r, "sentence": name, "context": k, "server_cpu_ms_per_request": round(ms, 4)})
                    print(json.dumps(rows[-1]), flush=True)
        summary = {}
        for name in ("one heteronym", "no heteronym"):
            on = [x["server_cpu_ms_per_request"] for x in rows if x["sentence"] == name and x["context"] == "on"]
            off = [x["server_cpu_ms_per_request"] for x in rows if x["sentence"] == name and x["context"] == "off"]
            summary[name] = {
                "on_ms": on,
                "off_ms": off,
                "on_minus_off_ms": [round(a - b, 4) for a, b in zip(on, off)],
                "on_over_off": [round(a / b, 4) for a, b in zip(on, off)],
            }
        report = {
            "machine": machine(),
            "requests_per_block": args.requests,
            "sentences": {"one heteronym": WITH_HOMOGRAPH, "no heteronym": WITHOUT},
            "answers_with_homograph": answers,
            "rows": rows,
            "summary": summary,
        }
        report["in_process"] = in_process(args.rounds, args.requests)
        report["stage_alone"] = stage_alone()
        print(json.dumps({"http": summary, "in_process": report["in_process"], "stage_alone": report["stage_alone"]}, indent=1))
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
