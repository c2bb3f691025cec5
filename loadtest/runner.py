"""The two load shapes, one level at a time.

Closed loop: `c` clients, each sends its next request when the previous one
answered; the server's speed sets the offered load. Open loop: requests arrive
as a Poisson process at a fixed rate, whatever the server does, and each
request's latency counts from its scheduled arrival, so a slow server (or a
slow client) cannot hide behind fewer requests (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import numpy as np

from attnserve.loadtest.client import GenerationParams, RequestRecord, generate_request, stream_request
from attnserve.loadtest.server_metrics import Scrape, scrape, server_figures


@dataclass(frozen=True)
class Level:
    mode: str  # "closed" (value = concurrency) or "open" (value = arrivals per second)
    value: float

    @property
    def label(self) -> str:
        return f"c={int(self.value)}" if self.mode == "closed" else f"rate={self.value:g}/s"

    def default_warmup(self) -> int:
        """One request per client (closed loop), one second of arrivals (open loop)."""
        return int(self.value) if self.mode == "closed" else max(1, math.ceil(self.value))


@dataclass
class Target:
    """Where and what to send."""

    url: str  # the generation route
    metrics_url: str | None
    headers: dict[str, str]
    inputs: list[str]
    params: GenerationParams
    timeout_s: float
    stream: bool = True  # Server-Sent Events (timed per token), or one JSON answer (timed as a whole)
    api: str = "tgi"  # "tgi": TGI's bodies and events; "openai": OpenAI's completions
    model: str | None = None  # the `model` an OpenAI request names


class Sender:
    """Hands out inputs round-robin and sends them; request indices are unique over the run."""

    def __init__(self, client: aiohttp.ClientSession, target: Target):
        self.client = client
        self.target = target
        self.next_index = 0

    def take(self) -> int:
        i = self.next_index
        self.next_index += 1
        return i

    async def send(self, index: int, due: float, level_start: float) -> RequestRecord:
        t = self.target
        text = t.inputs[index % len(t.inputs)]
        if t.api == "openai":
            payload = t.params.openai_payload(text, index, t.model, t.stream)
        else:
            payload = t.params.payload(text, index)
        send = stream_request if t.stream else generate_request
        return await send(
            self.client,
            t.url,
            payload,
            t.headers,
            index=index,
            due=due,
            level_start=level_start,
            timeout_s=t.timeout_s,
            api=t.api,
        )


async def closed_loop(
    sender: Sender, concurrency: int, requests: int | None, duration_s: float | None, on_done: Callable[[], None]
) -> tuple[list[RequestRecord], float]:
    """`concurrency` clients until `requests` were sent or `duration_s` passed; returns records and window."""
    records: list[RequestRecord] = []
    start = time.perf_counter()
    deadline = start + duration_s if duration_s else math.inf
    sent = 0

    async def client_loop() -> None:
        nonlocal sent
        while time.perf_counter() < deadline and (requests is None or sent < requests):
            sent += 1
            now = time.perf_counter()
            records.append(await sender.send(sender.take(), now, start))
            on_done()

    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    return records, _window(records, start)


async def open_loop(
    sender: Sender,
    rate: float,
    requests: int | None,
    duration_s: float | None,
    rng: np.random.Generator,
    on_done: Callable[[], None],
) -> tuple[list[RequestRecord], float]:
    """Poisson arrivals at `rate`/s until `requests` arrived or `duration_s` passed."""
    start = time.perf_counter()
    tasks: list[asyncio.Task] = []
    offset, n = 0.0, 0
    while (requests is None or n < requests) and (duration_s is None or offset < duration_s):
        due = start + offset
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(sender.send(sender.take(), due, start))
        task.add_done_callback(lambda _t: on_done())
        tasks.append(task)
        n += 1
        offset += rng.exponential(1.0 / rate)  # exponential gaps = Poisson arrivals
    records = list(await asyncio.gather(*tasks))
    return records, _window(records, start)


def _window(records: list[RequestRecord], start: float) -> float:
    """From the level's start to its last answer (0 if nothing was sent)."""
    return max((r.done_s for r in records), default=0.0)


async def _scrape_after(sender: Sender, before: Scrape, expected_ok: int) -> Scrape | str:
    """Scrape again until the server has recorded the level's answers (it may observe just after sending)."""
    t = sender.target
    deadline = time.perf_counter() + 2.0
    while True:
        after = await scrape(sender.client, t.metrics_url, t.headers)
        if isinstance(after, str):
            return after
        h_after = after.histograms["attnserve_request_generated_tokens"]["count"]
        h_before = before.histograms["attnserve_request_generated_tokens"]["count"]
        if h_after - h_before >= expected_ok or time.perf_counter() > deadline:
            return after
        await asyncio.sleep(0.05)


async def run_level(
    sender: Sender,
    level: Level,
    *,
    requests: int | None,
    duration_s: float | None,
    warmup: int,
    seed: int,
    progress: Callable[[int | None], tuple[Callable[[], None], Callable[[], None]]],
) -> tuple[list[RequestRecord], float, dict]:
    """Warm up (not counted), scrape /metrics, measure, scrape again.

    Returns the measured records, the window in seconds and the server's figures
    (`{"available": False, "reason": ...}` without an attnserve `/metrics`).
    `progress(total)` gives (tick, close) callbacks for the measured phase.
    """
    rng = np.random.default_rng(seed)

    async def phase(n: int | None, d: float | None, tick: Callable[[], None]):
        if level.mode == "closed":
            return await closed_loop(sender, int(level.value), n, d, tick)
        return await open_loop(sender, level.value, n, d, rng, tick)

    if warmup > 0:
        await phase(warmup, None, lambda: None)
    before = await scrape(sender.client, sender.target.metrics_url, sender.target.headers) if sender.target.metrics_url else None
    tick, close = progress(requests)
    try:
        records, window = await phase(requests, duration_s, tick)
    finally:
        close()
    if before is None:
        server = {"available": False, "reason": "metrics scraping turned off"}
    elif isinstance(before, str):
        server = {"available": False, "reason": before}
    else:
        after = await _scrape_after(sender, before, sum(r.ok for r in records))
        server = {"available": False, "reason": after} if isinstance(after, str) else server_figures(before, after)
    return records, window, server
