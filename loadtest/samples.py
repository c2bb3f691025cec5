"""What the load tester sends when not told (the server's own GET /samples), and when a level counts as failed.

Without `--input` the tool asks the server for inputs of its model's task: attnserve answers `GET /samples`
with sources from its bundle's parity corpus, so a model trained on any task is load-tested with inputs it
can read. A server without that route cannot say what its model reads, so the tool refuses to start.

A level whose failed requests exceed `--max-error-rate` (default 1%) makes the run exit non-zero, with the
first failures' status and the server's message: a load test of requests the server refuses measures the
refusals, not the model.
"""

from __future__ import annotations

import aiohttp

SAMPLES_ROUTE = "/samples"
SHOWN_FAILURES = 3  # per failing level


class NoSamples(Exception):
    """The server offers no samples; the message says to give --input."""


async def server_samples(client: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> tuple[list[str], str]:
    """(inputs, where they came from) from the server's GET /samples; NoSamples saying why and what to do."""
    why = None
    try:
        async with client.get(base + SAMPLES_ROUTE, headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as resp:
            body = await resp.json(content_type=None) if resp.status == 200 else None
            if resp.status != 200:
                why = f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        why = f"{type(e).__name__}: {e}"
        body = None
    return samples_in(base, body, why)


def server_samples_blocking(base: str, headers: dict[str, str]) -> tuple[list[str], str]:
    """server_samples without an event loop (the Locust file's start), through the standard library."""
    import json
    import urllib.error
    import urllib.request

    why, body = None, None
    try:
        with urllib.request.urlopen(urllib.request.Request(base + SAMPLES_ROUTE, headers=headers), timeout=30) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        why = f"HTTP {e.code}"
    except (OSError, ValueError) as e:
        why = f"{type(e).__name__}: {e}"
    return samples_in(base, body, why)


def samples_in(base: str, body, why: str | None) -> tuple[list[str], str]:
    """(inputs, where they came from) of a GET /samples answer `body`, or NoSamples naming `why` there are none."""
    samples = body.get("samples") if isinstance(body, dict) else None
    if why is None and (not isinstance(samples, list) or not all(isinstance(s, str) for s in samples) or not samples):
        why = "no list of inputs in its answer"
    if why is not None:
        raise NoSamples(
            f"{base} offers no sample inputs (GET {SAMPLES_ROUTE}: {why}), so this tool cannot tell what its model reads: "
            "give --input FILE, one input per line that the model can read"
        )
    source = body.get("source") if isinstance(body.get("source"), str) else "the server"
    return samples, f"GET {SAMPLES_ROUTE}: {source}"


def failed_levels(levels: list[dict], max_error_rate: float) -> list[str]:
    """One paragraph per level whose share of failed requests is above `max_error_rate`: the share, then the first
    failures' status (or error kind) and the server's message. Reads the levels' records."""
    out = []
    for lv in levels:
        s = lv["summary"]
        total = s["ok"] + s["failed"]
        if not total or s["failed"] / total <= max_error_rate:
            continue
        lines = [
            f"level {lv['label']}: {s['failed']} of {total} requests failed ({100 * s['failed'] / total:.1f}%, "
            f"more than {100 * max_error_rate:g}%); the first:"
        ]
        failures = [r for r in lv.get("records", []) if not r["ok"]][:SHOWN_FAILURES]
        for r in failures:
            status = f"HTTP {r['status']}" if r.get("status") not in (None, 200) else r.get("error_kind") or "error"
            lines.append(f"  request {r['index']}: {status}: {r.get('error') or '(no body)'}")
        out.append("\n".join(lines))
    return out
