"""Per-level figures from the request records: latency percentiles, throughput, errors, goodput."""

from __future__ import annotations

import numpy as np

from attnserve.loadtest.client import ERROR_KINDS, RequestRecord

ITL_FORMULA = "ITL = (e2e - TTFT) / (output_tokens - 1), per request, first token excluded (genai-perf)"
SLO_KEYS = ("ttft_ms", "itl_ms", "e2e_ms")
# Below these a level's percentiles rest on too few answers, or on too short a time to see the server's steady
# state (its batches filling, a GC pause, the client's own hiccups): the figures are printed with a warning.
MIN_TRUSTED_REQUESTS = 200
MIN_TRUSTED_SECONDS = 5.0


class SloError(ValueError):
    pass


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft_ms=200,e2e_ms=2000` -> {"ttft_ms": 200.0, "e2e_ms": 2000.0}."""
    if not text:
        return {}
    slo: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in SLO_KEYS:
            raise SloError(f"--slo: expected KEY=MILLISECONDS with KEY in {', '.join(SLO_KEYS)}, got {part!r}")
        try:
            slo[key] = float(value)
        except ValueError:
            raise SloError(f"--slo: {key} needs a number of milliseconds, got {value!r}") from None
        if slo[key] <= 0:
            raise SloError(f"--slo: {key} must be > 0")
    return slo


def describe(values_s: list[float], scale: float = 1000.0) -> dict | None:
    """mean/p50/p90/p99/min/max of `values_s` times `scale` (seconds -> ms by default); None if empty."""
    if not values_s:
        return None
    a = np.asarray(values_s, dtype=np.float64) * scale
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "n": int(a.size),
        "mean": float(a.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def meets_slo(rec: RequestRecord, slo: dict[str, float]) -> bool:
    if not rec.ok:
        return False
    if "ttft_ms" in slo and rec.ttft_s is not None and rec.ttft_s * 1000 > slo["ttft_ms"]:
        return False
    if "e2e_ms" in slo and rec.e2e_s * 1000 > slo["e2e_ms"]:
        return False
    itl = rec.itl_s
    return not ("itl_ms" in slo and itl is not None and itl * 1000 > slo["itl_ms"])


def summarize(records: list[RequestRecord], window_s: float, slo: dict[str, float]) -> dict:
    """Figures of one measured level; `window_s` runs from the level's start to its last answer."""
    ok = [r for r in records if r.ok]
    errors = {kind: 0 for kind in ERROR_KINDS}
    samples: dict[str, list[str]] = {}
    for r in records:
        if not r.ok:
            errors[r.error_kind] += 1
            seen = samples.setdefault(r.error_kind, [])
            if r.error and r.error not in seen and len(seen) < 3:
                seen.append(r.error)
    tokens = sum(r.output_tokens for r in ok)
    window = max(window_s, 1e-9)
    send_lag = [max(0.0, r.sent_s - r.due_s) for r in records]
    return {
        "requests": len(records),
        "ok": len(ok),
        "failed": len(records) - len(ok),
        "errors": errors,
        "error_samples": samples,
        "window_s": window_s,
        "requests_per_s": len(ok) / window,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / window,
        "goodput_per_s": (sum(meets_slo(r, slo) for r in ok) / window) if slo else None,
        "slo": slo or None,
        "ttft_ms": describe([r.ttft_s for r in ok if r.ttft_s is not None]),  # None when not streamed
        "itl_ms": describe([r.itl_s for r in ok if r.itl_s is not None]),
        "e2e_ms": describe([r.e2e_s for r in ok]),
        "output_tokens_per_request": describe([float(r.output_tokens) for r in ok], scale=1.0),
        "client_send_lag_ms": describe(send_lag),
        "small_sample": small_sample(len(records), window_s),
    }


def small_sample(requests: int, window_s: float) -> str | None:
    """Why a level of `requests` requests over `window_s` seconds is too small to trust; None when it is not."""
    short = [
        f"{requests} requests" if requests < MIN_TRUSTED_REQUESTS else "",
        f"{window_s:.1f} s" if window_s < MIN_TRUSTED_SECONDS else "",
    ]
    if not any(short):
        return None
    return (
        f"only {' in '.join(x for x in short if x)}: too small a sample to trust its percentiles "
        f"(at least {MIN_TRUSTED_REQUESTS} requests over at least {MIN_TRUSTED_SECONDS:g} s; raise --requests or --duration)"
    )
