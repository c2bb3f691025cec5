"""Shared by the service tests: a real uvicorn server on 127.0.0.1 in a thread, SSE parsing, metric scrapes.

`PacedEngine` is the real ONNX Runtime engine with an optional pause before
each decoder step: a stand-in for a bigger model, so a test can act while a
request is mid-generation (a disconnect, a second request, SIGTERM) without
racing a tiny model that finishes in milliseconds. Outputs are unchanged.

Run as a script, it serves a bundle through `attnserve.service.cli.serve` with that
engine (the SIGTERM test needs a real process):
    python tests/service_harness.py BUNDLE --port N --step-delay 0.02 [--max-batch-size 1 ...]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from attnserve.service.engine.bundle import load_bundle  # noqa: E402
from attnserve.service.engine.engine import Engine  # noqa: E402


class PacedEngine(Engine):
    """The real engine; `step_delay_s` sleeps before each decoder step, `fail` makes the next step raise."""

    step_delay_s = 0.0
    fail = False

    def step(self, batch):
        if self.fail:
            raise RuntimeError("injected engine failure")
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        return super().step(batch)


def load_engine(bundle_dir: Path, step_delay_s: float = 0.0, variant: str = "auto") -> PacedEngine:
    engine = PacedEngine(load_bundle(bundle_dir), variant=variant, threads=1)
    engine.step_delay_s = step_delay_s
    return engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving `app` on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app):
        import uvicorn

        self.app = app
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=app.state.settings.keepalive_timeout_s,  # as attnserve-serve runs it
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)

    @property
    def service(self):
        return self.app.state.service

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@contextlib.contextmanager
def serving(bundle_dir: Path, step_delay_s: float = 0.0, keepalive_s: float = 15.0, **settings) -> Iterator[ServerThread]:
    """A server for one test (or module): real engine, real uvicorn, loopback only."""
    from attnserve.service.http.app import create_app
    from attnserve.service.settings import Settings

    engine = load_engine(bundle_dir, step_delay_s, settings.get("variant", "auto"))
    app = create_app(Settings(bundle=bundle_dir, threads=1, **settings), engine, keepalive_s=keepalive_s)
    with ServerThread(app) as server:
        yield server


def sse_events(lines: Iterator[str]) -> Iterator[dict | str]:
    """Parse a Server-Sent Events body: dicts for `data:` events, the string "keep-alive" for comments."""
    for line in lines:
        if line.startswith(":"):
            yield "keep-alive"
        elif line.startswith("data:"):
            yield json.loads(line[len("data:") :])


def stream(url: str, body: dict, client: httpx.Client | None = None) -> tuple[int, list]:
    """POST a streaming request; (status, events or the error body)."""
    c = client or httpx.Client(timeout=60)
    with c.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [r.json()]
        return 200, [e for e in sse_events(r.iter_lines()) if e != "keep-alive"]


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    text = httpx.get(url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(samples: dict, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def assert_generation_stopped(url: str, before: dict, route: str) -> None:
    """After a client went away mid-stream: its row left at a step boundary, well before the end (at most 12 tokens of
    the 48 asked for), and the request counted as cancelled (`before`: a scrape from before the request)."""
    time.sleep(0.2)  # a few steps: the row leaves at the next step boundary
    tokens = metric(scrape(url), "attnserve_generated_tokens_total")
    time.sleep(0.3)
    after = scrape(url)
    assert metric(after, "attnserve_generated_tokens_total") == tokens  # stopped growing
    assert tokens - metric(before, "attnserve_generated_tokens_total") < 12  # and well before the end
    assert metric(after, "attnserve_running_sequences") == 0
    cancelled = {"route": route, "outcome": "cancelled"}
    assert metric(after, "attnserve_requests_total", **cancelled) - metric(before, "attnserve_requests_total", **cancelled) == 1


def main(argv: list[str] | None = None) -> int:
    import argparse

    from attnserve.service.cli import serve
    from attnserve.service.settings import Settings

    p = argparse.ArgumentParser()
    p.add_argument("bundle", type=Path)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--step-delay", type=float, default=0.0)
    p.add_argument("--max-batch-size", type=int, default=8)
    p.add_argument("--drain-timeout-s", type=float, default=30.0)
    args = p.parse_args(argv)
    settings = Settings(
        bundle=args.bundle,
        port=args.port,
        threads=1,
        max_batch_size=args.max_batch_size,
        drain_timeout_s=args.drain_timeout_s,
    )
    return serve(settings, load_engine(args.bundle, args.step_delay))


if __name__ == "__main__":
    sys.exit(main())


def read_one(gen, text: str, **params):
    """One line's TextResult from an in-process Generator (`gen.generate_text_many`), failing on an InputError."""
    from attnserve.service.client import InputError

    r = next(gen.generate_text_many([text], **params))
    assert not isinstance(r, InputError), r
    return r
