"""What uvicorn, uvloop and httptools cost per request by themselves: the floor under the serving tax's event loop.

    .venv/bin/python -m benchmarks.http_floor [--clients 64] [--requests 3000] [--out DIR]

A bare ASGI app (no FastAPI, no text layer, no engine) served as attnserve-serve serves (uvicorn with uvloop and
httptools, on core 0) answers the lean closed-loop client of http_overhead.py (on core 1) on the same two routes:
`/generate` answers one JSON body after 9 wake-ups and `/generate_stream` one SSE event per wake-up, 9 of them
(about an answer's 8.4 tokens and its end). The wake-ups come from a stub engine thread, one `call_soon_threadsafe`
every 2 ms for every waiting request, as the scheduler wakes its owners once per step. The server's CPU per request
(/proc, all threads) is the part of the tax that no change to attnserve's own code can remove.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from benchmarks.http_overhead import _closed_loop, proc_cpu_s, pseudo_words
from benchmarks.measure import machine, write_report

APP = textwrap.dedent(
    """
    import asyncio, threading, time

    STEPS = 9
    EVENT = (b'data:{"index":%d,"token":{"id":5,"text":"AH0","logprob":-0.1,"special":false},'
             b'"top_tokens":null,"generated_text":null,"details":null}\\n\\n')
    loop_ref, waiting = {}, set()

    def engine():  # one wake-up of the event loop per 2 ms "step" for every request waiting on one
        while True:
            time.sleep(0.002)
            loop = loop_ref.get("loop")
            if loop is not None and waiting:
                loop.call_soon_threadsafe(lambda events=list(waiting): [e.set() for e in events])

    threading.Thread(target=engine, daemon=True).start()

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    loop_ref["loop"] = asyncio.get_running_loop()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        while (await receive()).get("more_body"):
            pass
        ready = asyncio.Event()
        waiting.add(ready)
        try:
            if scope["path"] == "/generate_stream":
                await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
                for i in range(STEPS):
                    ready.clear()
                    await ready.wait()
                    await send({"type": "http.response.body", "body": EVENT % i, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            for _ in range(STEPS):
                ready.clear()
                await ready.wait()
        finally:
            waiting.discard(ready)
        body = b'{"generated_text":"Z AO1 R B L AH0 T","details":null}'
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    """
)


def serve(workdir: Path) -> tuple[subprocess.Popen, str]:
    (workdir / "floor_app.py").write_text(APP)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port)]
    cmd += ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the bare server did not start")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "serving_tax")
    args = p.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        p.error("needs cores 0 and 1")
    proc, url = serve(Path(tempfile.mkdtemp(prefix="http_floor_")))
    os.sched_setaffinity(0, {1})
    words = pseudo_words(600)
    levels = []
    try:
        for r in range(1, args.rounds + 1):
            for route in ("/generate", "/generate_stream"):
                asyncio.run(_closed_loop(url, route, words, "floor", args.clients, args.clients))  # warm-up
                cpu0, t0 = proc_cpu_s(proc.pid), time.perf_counter()
                answered, failed = asyncio.run(_closed_loop(url, route, words, "floor", args.clients, args.requests))
                cpu, seconds = proc_cpu_s(proc.pid) - cpu0, time.perf_counter() - t0
                level = {"round": r, "route": route, "clients": args.clients, "answered": answered, "failed": failed}
                level |= {"server_cpu_ms_per_request": cpu * 1000 / answered, "requests_per_s": answered / seconds}
                levels.append(level)
                print(f"{route:17s} round {r}: {level['server_cpu_ms_per_request']:.3f} ms of server CPU per request", flush=True)
    finally:
        proc.kill()
    argv = " ".join(["python -m benchmarks.http_floor", *sys.argv[1:]])
    print(write_report(args.out, "http_floor", {"command": argv, "machine": machine(), "levels": levels}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
