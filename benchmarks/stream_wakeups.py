"""The event loop's CPU per streamed request in one process, without sockets, against the real engine thread: the
stream alone (admission, its start and its wake-ups) and the whole app (the front door, the body's parsing, the
access log), as `/generate_stream` runs them.

    .venv/bin/python -m benchmarks.stream_wakeups [--clients 64] [--requests 3000] [--repeats 3] [--out DIR]

The default model is served in process (the app's own lifespan: one ONNX Runtime thread, max batch 32, the engine
thread running), all on core 0. `--clients` coroutines on the event loop send out-of-dictionary pseudo-words
(`"lexicon": false`), one request after another, until `--requests` are answered: `stream` admits each and answers it
with `push_stream` (service/http/generation.py); `app` calls the ASGI app with the request as uvicorn hands it over.
Both `send`s keep nothing. The loop thread's CPU over them, per request, is the part of the serving tax's event loop
that is the service's own: uvicorn's parsing and the socket writes are not in it. Also timed: a loopback TCP send
of an SSE chunk's size to a reader on core 1, back to back (what each write adds on a socket).
Writes DIR/stream_wakeups_TIME.json.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import orjson

from attnserve.service.http.app import create_app
from attnserve.service.http.generation import push_stream
from attnserve.service.http.logs import configure_logging
from attnserve.service.http.responses import SSEWriter
from attnserve.service.http.schemas import GenerateRequest
from attnserve.service.settings import Settings
from benchmarks.http_overhead import ROOT, pseudo_words
from benchmarks.measure import machine, write_report

ENGINE_THREAD = "attnserve-engine"  # service/engine/scheduler.py names it so


async def drive(app, words: list[str], clients: int, requests: int, whole_app: bool) -> tuple[float, float]:
    """`requests` streams over `clients` coroutines; the loop thread's and the engine thread's CPU per request, µs."""
    svc = app.state.service
    left = iter(range(requests))

    async def one(word: str) -> None:
        done = asyncio.Event()
        raw = orjson.dumps({"inputs": word, "parameters": {"lexicon": False}})
        bodies = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive():
            if bodies:
                return bodies.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                done.set()

        if whole_app:
            await app(scope(raw), receive, send)
        else:
            job = svc.admit(GenerateRequest.model_validate_json(raw), stream=True)
            await push_stream(job, SSEWriter(job, "/generate_stream", svc.metrics), [], svc.keepalive_s, receive, send)

    async def client() -> None:
        for i in left:
            await one(words[i % len(words)])

    engine = time.pthread_getcpuclockid(next(t.ident for t in threading.enumerate() if t.name == ENGINE_THREAD))
    t0, e0 = time.thread_time(), time.clock_gettime(engine)
    await asyncio.gather(*(client() for _ in range(clients)))
    return (time.thread_time() - t0) / requests * 1e6, (time.clock_gettime(engine) - e0) / requests * 1e6


def scope(body: bytes) -> dict:
    """A POST /generate_stream as uvicorn hands it to the app."""
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/generate_stream",
        "raw_path": b"/generate_stream",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def measure(settings: Settings, args: argparse.Namespace) -> dict[str, list[float]]:
    app = create_app(settings)
    words = pseudo_words(600)
    runs: dict[str, list[float]] = {"stream": [], "app": [], "engine_thread": []}
    async with app.router.lifespan_context(app):
        for whole_app in (False, True):  # warm-up
            await drive(app, words, args.clients, args.clients, whole_app)
        for _ in range(args.repeats):
            for whole_app in (False, True):
                loop_us, engine_us = await drive(app, words, args.clients, args.requests, whole_app)
                runs["app" if whole_app else "stream"].append(round(loop_us, 1))
                runs["engine_thread"].append(round(engine_us, 1))
    return runs


def drain(port: int) -> None:
    """A reader on core 1 that takes everything sent to it (a process of its own, as a client is)."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    with socket.create_connection(("127.0.0.1", port)) as s:
        while s.recv(65536):
            pass


def send_cost(n: int = 20000) -> float:
    """CPU µs of one 150-byte send on a loopback TCP connection, back to back."""
    server = socket.create_server(("127.0.0.1", 0))
    reader = multiprocessing.get_context("spawn").Process(target=drain, args=(server.getsockname()[1],))
    reader.start()
    writer, _ = server.accept()
    writer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = b"x" * 150
    t0 = time.thread_time()
    for _ in range(n):
        writer.sendall(chunk)
    cost = (time.thread_time() - t0) / n * 1e6
    writer.close()
    server.close()
    reader.join(timeout=30)
    return cost


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = p.parse_args()
    os.sched_setaffinity(0, {0})
    configure_logging("info")  # the access log as served, into /dev/null here
    logging.getLogger().handlers[0].setStream(open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    settings = Settings(bundle=ROOT / "models/g2p-en", threads=1, max_batch_size=32, max_concurrent_requests=1024)
    runs = asyncio.run(measure(settings, args))
    sends = [round(send_cost(), 2) for _ in range(args.repeats)]
    result = {
        "command": "python -m benchmarks.stream_wakeups " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "clients": args.clients,
        "requests": args.requests,
        "event_loop_us_per_request": runs,
        "loopback_send_us": sends,
    }
    print(
        f"event loop CPU a streamed request, in process: the stream {statistics.median(runs['stream']):.1f} µs, the whole app "
        f"{statistics.median(runs['app']):.1f} µs; the engine thread {statistics.median(runs['engine_thread']):.1f} µs "
        f"(runs: {runs}); a loopback send {statistics.median(sends):.2f} µs"
    )
    print(f"raw: {write_report(args.out, 'stream_wakeups', result)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
