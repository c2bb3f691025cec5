"""Prometheus metrics, named exactly as ARCHITECTURE.md fixes them; every one carries `model` = the bundle's model_id.

Histograms, not summaries, so replicas aggregate (`histogram_quantile` over
`sum by (le)`). Each `ServiceMetrics` owns its registry, so two apps in one
process (tests) never share counts. Where each is observed:
- the route handlers: `attnserve_requests_total{route,outcome}`,
  `attnserve_request_duration_seconds` (successful generation requests);
- the scheduler's engine thread: everything else (see service/engine/scheduler.py).
The README documents each metric and the formulas for TTFT and inter-token latency.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Latency buckets from 0.5 ms (one decoder step of a small model) to 2 minutes (a long request under load).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
STEP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServiceMetrics:
    """The service's metric families, with the `model` label already applied where it is the only label."""

    def __init__(self, model_id: str, registry: CollectorRegistry | None = None):
        self.model_id = model_id
        self.registry = registry if registry is not None else CollectorRegistry()
        r, m = self.registry, ["model"]

        def hist(name: str, doc: str, buckets: tuple) -> Histogram:
            return Histogram(name, doc, m, buckets=buckets, registry=r).labels(model_id)

        self.request_duration = hist(
            "attnserve_request_duration_seconds",
            "Successful generation requests: from arrival to the last byte of the answer.",
            LATENCY_BUCKETS,
        )
        self.queue_duration = hist(
            "attnserve_request_queue_duration_seconds",
            "From arrival to joining the running batch (the encoder call).",
            LATENCY_BUCKETS,
        )
        self.time_to_first_token = hist(
            "attnserve_time_to_first_token_seconds",
            "From arrival to the first generated token leaving the engine.",
            LATENCY_BUCKETS,
        )
        self.inter_token_latency = hist(
            "attnserve_inter_token_latency_seconds",
            "Gap between two successive tokens of one request (one observation per token after the first).",
            LATENCY_BUCKETS,
        )
        self.inference_duration = hist(
            "attnserve_inference_duration_seconds",
            "From joining the batch to the last token: encoder plus every decoder step the request took part in.",
            LATENCY_BUCKETS,
        )
        self.encoder_duration = hist(
            "attnserve_encoder_duration_seconds",
            "One encoder call, for the group of requests joining the batch at one step boundary.",
            STEP_BUCKETS,
        )
        self.decoder_step_duration = hist(
            "attnserve_decoder_step_duration_seconds",
            "One decoder step for the whole running batch, token choice included.",
            STEP_BUCKETS,
        )
        self.batch_size = hist("attnserve_batch_size", "Sequences in the batch at each decoder step.", BATCH_BUCKETS)
        self.input_tokens = hist(
            "attnserve_request_input_tokens", "Input length of each request, in source tokens.", TOKEN_BUCKETS
        )
        self.generated_tokens = hist(
            "attnserve_request_generated_tokens", "Tokens generated for each finished request.", TOKEN_BUCKETS
        )
        self.generated_tokens_total = Counter(
            "attnserve_generated_tokens", "Tokens generated, counted at every decoder step.", m, registry=r
        ).labels(model_id)
        self._requests_total = Counter(
            "attnserve_requests",
            "Generation requests by route and outcome (success, or the error_type, or cancelled).",
            ["model", "route", "outcome"],
            registry=r,
        )
        self._requests_by_route: dict[tuple[str, str], Counter] = {}
        self.queue_size = Gauge("attnserve_queue_size", "Requests waiting to join the batch.", m, registry=r).labels(model_id)
        self.running_sequences = Gauge("attnserve_running_sequences", "Sequences in the running batch.", m, registry=r).labels(
            model_id
        )

    def request_done(self, route: str, outcome: str) -> None:
        # the child of each (route, outcome) kept here: `labels` builds its key and takes a lock on every call, three
        # times what the increment costs; both sets are small and fixed (the routes, the error types)
        counter = self._requests_by_route.get((route, outcome))
        if counter is None:
            counter = self._requests_by_route[route, outcome] = self._requests_total.labels(self.model_id, route, outcome)
        counter.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def observe_counted(histogram, counted: Iterable[tuple[float, int]]) -> None:
    """Observations on a histogram child, `count` of each `amount` in `counted`, as as many `observe` calls make them,
    with one addition to the sum and one per bucket hit. The engine thread observes a step's values together: every
    streaming row's inter-token gap (one value, 32 times at 32 rows), and the requests that start or finish (five
    histograms each); each `observe` takes two locks and checks the child. prometheus_client has no such call; its
    histogram child keeps one value per bucket (`_buckets`, bounds `_upper_bounds`) and the sum (`_sum`), which this
    adds to as `observe` does (tests/http/test_metrics.py compares the expositions)."""
    counted = list(counted)
    buckets = getattr(histogram, "_buckets", None)
    if buckets is None or not hasattr(histogram, "_sum") or any(a != a for a, _ in counted):  # not the child this knows (or NaN)
        for amount, count in counted:
            for _ in range(count):
                histogram.observe(amount)
        return
    if not counted:
        return
    histogram._raise_if_not_observable()
    histogram._sum.inc(sum(amount * count for amount, count in counted))
    bounds = histogram._upper_bounds
    hits: dict[int, int] = {}
    for amount, count in counted:
        i = bisect_left(bounds, amount)
        hits[i] = hits.get(i, 0) + count
    for i, n in hits.items():
        if n:
            buckets[i].inc(n)


class StepObservations:
    """The decode steps' own observations (each step's duration and rows, the streaming rows' inter-token gaps), kept
    here and added to the histograms together (`observe_counted`) when a request finishes, when the batch empties, or
    every FLUSH_STEPS steps. Each metric call takes a lock and, right after the decoder's call, runs from cold caches:
    at one client a step would make six of them for one row. A request's answer still finds every step it took in the
    metrics, since the scheduler observes before it wakes the owners of the requests that finished."""

    FLUSH_STEPS = 32  # at most this many steps unobserved (tens of ms): a dashboard scraping mid-request lags no more

    def __init__(self, metrics: ServiceMetrics):
        self.metrics = metrics
        self.durations: list[tuple[float, int]] = []
        self.rows: dict[int, int] = {}  # rows in a step -> steps
        self.gaps: dict[float, int] = {}  # inter-token gap -> streaming rows that had it

    def add(self, seconds: float, rows: int) -> bool:
        """One step's duration and rows; True when FLUSH_STEPS steps wait to be observed."""
        self.durations.append((seconds, 1))
        self.rows[rows] = self.rows.get(rows, 0) + 1
        return len(self.durations) >= self.FLUSH_STEPS

    def observe(self) -> None:
        if not self.durations:
            return
        m = self.metrics
        observe_counted(m.decoder_step_duration, self.durations)
        observe_counted(m.batch_size, self.rows.items())
        observe_counted(m.inter_token_latency, self.gaps.items())
        m.generated_tokens_total.inc(sum(rows * steps for rows, steps in self.rows.items()))  # a token per row and step
        self.durations, self.rows, self.gaps = [], {}, {}
