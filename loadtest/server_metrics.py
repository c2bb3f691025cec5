"""Server-side figures from the Prometheus `/metrics` page, scraped before and after a level.

The difference of two scrapes is what the server saw during the level, a
cross-check on the client's own timings. Histograms are summed over their
label sets (`model`, ...); quantiles are estimated from the bucket counts the
way Prometheus' `histogram_quantile` does (linear within a bucket).
"""

from __future__ import annotations

import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# Histogram -> (report name, scale to the report's unit).
HISTOGRAMS = {
    "attnserve_request_queue_duration_seconds": ("queue_ms", 1000.0),
    "attnserve_batch_size": ("batch_size", 1.0),
    "attnserve_time_to_first_token_seconds": ("ttft_ms", 1000.0),
    "attnserve_inter_token_latency_seconds": ("itl_ms", 1000.0),
    "attnserve_request_duration_seconds": ("request_ms", 1000.0),
    "attnserve_request_generated_tokens": ("generated_tokens", 1.0),
}


class Scrape:
    """One parsed `/metrics` page: histogram buckets and sums, counters by label set."""

    def __init__(self, text: str):
        # name -> {"buckets": {le: count}, "sum": float, "count": float}, summed over label sets
        self.histograms: dict[str, dict] = {}
        # name -> {frozenset(labels): value}
        self.counters: dict[str, dict[frozenset, float]] = {}
        for family in text_string_to_metric_families(text):
            if family.type == "histogram":
                h = self.histograms.setdefault(family.name, {"buckets": {}, "sum": 0.0, "count": 0.0})
                for s in family.samples:
                    if s.name.endswith("_bucket"):
                        le = float(s.labels["le"])
                        h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
                    elif s.name.endswith("_sum"):
                        h["sum"] += s.value
                    elif s.name.endswith("_count"):
                        h["count"] += s.value
            elif family.type == "counter":
                values = self.counters.setdefault(family.name, {})
                for s in family.samples:
                    if s.name.endswith("_total"):
                        values[frozenset(s.labels.items())] = s.value


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus-style quantile from cumulative bucket counts {upper bound: count}."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    prev_bound, prev_count = 0.0, 0.0
    for b in bounds:
        count = buckets[b]
        if count >= rank:
            if math.isinf(b):
                return prev_bound  # the answer lies above the highest finite bound
            if count == prev_count:
                return b
            return prev_bound + (b - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = b, count
    return bounds[-1]


def histogram_delta(before: Scrape, after: Scrape, name: str) -> dict | None:
    a = after.histograms.get(name)
    if a is None:
        return None
    b = before.histograms.get(name, {"buckets": {}, "sum": 0.0, "count": 0.0})
    buckets = {le: a["buckets"][le] - b["buckets"].get(le, 0.0) for le in a["buckets"]}
    return {"buckets": buckets, "sum": a["sum"] - b["sum"], "count": a["count"] - b["count"]}


def server_figures(before: Scrape, after: Scrape) -> dict:
    """What the server recorded between two scrapes: mean/p50/p99 of each known histogram, request outcomes."""
    out: dict = {"available": True}
    for name, (key, scale) in HISTOGRAMS.items():
        d = histogram_delta(before, after, name)
        if d is None or d["count"] <= 0:
            out[key] = None
            continue
        p50 = histogram_quantile(0.5, d["buckets"])
        p99 = histogram_quantile(0.99, d["buckets"])
        out[key] = {
            "count": d["count"],
            "sum": d["sum"] * scale,
            "mean": d["sum"] / d["count"] * scale,
            "p50_est": None if p50 is None else p50 * scale,
            "p99_est": None if p99 is None else p99 * scale,
        }
    outcomes: dict[str, float] = {}
    b_req = before.counters.get("attnserve_requests", {})
    for labels, value in after.counters.get("attnserve_requests", {}).items():
        outcome = dict(labels).get("outcome", "")
        delta = value - b_req.get(labels, 0.0)
        if delta:
            outcomes[outcome] = outcomes.get(outcome, 0.0) + delta
    out["requests_by_outcome"] = outcomes
    return out


async def scrape(client: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Scrape | str:
    """The parsed page, or a string saying why there is none (the server may not be attnserve)."""
    try:
        async with client.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return f"{url}: HTTP {resp.status}"
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError) as e:
        return f"{url}: {type(e).__name__}: {e}"
    try:
        parsed = Scrape(text)
    except ValueError as e:
        return f"{url}: not a Prometheus text page ({e})"
    if "attnserve_request_generated_tokens" not in parsed.histograms:
        return f"{url}: no attnserve_* metrics (not an attnserve server?)"
    return parsed
