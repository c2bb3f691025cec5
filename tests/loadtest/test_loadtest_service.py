"""attnserve-loadtest and the locustfile against the real server (tiny bundle, real uvicorn on 127.0.0.1)."""

from __future__ import annotations

import json

from service_harness import metric, scrape, serving
from test_loadtest import run_locust

from attnserve.loadtest import inprocess
from attnserve.loadtest.cli import main


def run_cli(tmp_path, name, url, *args):
    out = tmp_path / name
    rc = main([url, "--out", str(out), "--no-progress", *args])
    return rc, json.loads((out / "results.json").read_text())


def test_real_server_yields_every_figure_with_sane_relations(tiny_bundle_dir, tmp_path):
    with serving(tiny_bundle_dir, max_batch_size=8, max_concurrent_requests=64) as server:
        before = scrape(server.url)
        rc, result = run_cli(
            tmp_path,
            "greedy",
            server.url,
            *("--concurrency", "1,4", "--requests", "12", "--warmup", "0", "--max-new-tokens", "24"),
            *("--slo", "ttft_ms=60000,e2e_ms=60000"),
        )
        after = scrape(server.url)
        rc_sampled, sampled = run_cli(
            tmp_path,
            "sampled",
            server.url,
            *("--rate", "20", "--requests", "6", "--warmup", "1", "--do-sample", "--temperature", "0.8", "--seed", "5"),
        )
    assert rc == 0 and rc_sampled == 0
    assert result["server_info"]["model_id"] == "g2p-tiny"
    for lv in result["levels"]:
        s, srv = lv["summary"], lv["server"]
        assert s["ok"] == 12 and s["failed"] == 0 and not any(s["errors"].values())
        for key in ("ttft_ms", "itl_ms", "e2e_ms"):
            assert 0 < s[key]["min"] <= s[key]["p50"] <= s[key]["p90"] <= s[key]["p99"] <= s[key]["max"]
        for r in lv["records"]:
            assert 0 < r["ttft_s"] <= r["e2e_s"] and r["output_tokens"] >= 1
            assert r["itl_s"] is None or r["itl_s"] == (r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)
        assert s["requests_per_s"] > 0 and s["output_tokens_per_s"] == s["output_tokens"] / s["window_s"]
        assert s["goodput_per_s"] == s["requests_per_s"]  # a one-minute SLO: every answer meets it
        # the server's own view of the same level: same requests, same tokens
        assert srv["available"]
        assert srv["generated_tokens"]["count"] == 12
        assert srv["generated_tokens"]["sum"] == s["output_tokens"]
        assert srv["requests_by_outcome"] == {"success": 12}
        assert srv["queue_ms"]["count"] == 12 and srv["queue_ms"]["mean"] >= 0
        assert 1 <= srv["batch_size"]["mean"] <= 8
        assert srv["ttft_ms"]["mean"] <= s["ttft_ms"]["max"]  # server-side TTFT excludes the network
    # an independent scrape around the whole run: every streamed token is one the server counted
    streamed = sum(r["output_tokens"] for lv in result["levels"] for r in lv["records"])
    counted = metric(after, "attnserve_request_generated_tokens_sum") - metric(before, "attnserve_request_generated_tokens_sum")
    assert streamed == counted
    s = sampled["levels"][0]["summary"]
    assert sampled["config"]["parameters"]["do_sample"] is True and s["ok"] == 6

    # the in-process twin (python -m attnserve.loadtest.inprocess) sends the same inputs in the same order to the
    # same engine without HTTP: greedy, so each request streams exactly as many tokens as over HTTP
    out = tmp_path / "inprocess.json"
    args = [str(tiny_bundle_dir), "--requests", "12", "--warmup", "1", "--max-new-tokens", "24", "--out", str(out)]
    assert inprocess.main([*args, "--compare", str(tmp_path / "greedy" / "results.json")]) == 0
    local = json.loads(out.read_text())
    http_c1 = result["levels"][0]
    assert [r["output_tokens"] for r in local["records"]] == [r["output_tokens"] for r in http_c1["records"]]
    overhead = local["http_overhead_p50_ms"]
    assert overhead["e2e_ms"] == http_c1["summary"]["e2e_ms"]["p50"] - local["summary"]["e2e_ms"]["p50"]


def test_overloaded_real_server_429s_are_counted(tiny_bundle_dir, tmp_path):
    # One request at a time, each slowed to ~20 ms a step: six clients must mostly be refused.
    with serving(tiny_bundle_dir, step_delay_s=0.02, max_concurrent_requests=1) as server:
        args = ("--concurrency", "6", "--requests", "18", "--warmup", "0", "--max-error-rate", "1")  # 429s expected
        rc, result = run_cli(tmp_path, "overload", server.url, *args)
    assert rc == 0
    lv = result["levels"][0]
    s = lv["summary"]
    assert s["requests"] == 18 and s["errors"]["http_429"] > 0
    assert s["ok"] + s["errors"]["http_429"] == 18
    assert lv["server"]["requests_by_outcome"] == {"success": s["ok"], "overloaded": s["errors"]["http_429"]}


def test_locustfile_runs_headless_against_the_real_server(tiny_bundle_dir, tmp_path):
    with serving(tiny_bundle_dir, max_batch_size=8) as server:
        stats = run_locust(server.url, tmp_path, seconds=3, users=2)
    for name in ("/generate_stream", "TTFT", "ITL", "e2e"):
        assert int(stats[name]["Request Count"]) > 0, name
        assert int(stats[name]["Failure Count"]) == 0, name
    assert float(stats["TTFT"]["Average Response Time"]) <= float(stats["e2e"]["Average Response Time"])


def test_no_stream_drives_generate_and_counts_the_same_tokens(tiny_bundle_dir, tmp_path):
    with serving(tiny_bundle_dir, max_batch_size=8, max_concurrent_requests=64) as server:
        args = ("--concurrency", "4", "--requests", "16", "--warmup", "0", "--max-new-tokens", "24", "--no-plots")
        rc, plain = run_cli(tmp_path, "plain", server.url, "--no-stream", *args, "--slo", "e2e_ms=60000")
        rc_streamed, streamed = run_cli(tmp_path, "streamed", server.url, *args)
        rc_compat, compat = run_cli(tmp_path, "compat", server.url, "--no-stream", "--endpoint", "/", *args)
        by_route = scrape(server.url)
    assert rc == rc_streamed == rc_compat == 0
    assert (plain["config"]["endpoint"], plain["config"]["stream"]) == ("/generate", False)
    (lv,) = plain["levels"]
    s, srv = lv["summary"], lv["server"]
    assert s["ok"] == 16 and s["failed"] == 0
    assert s["ttft_ms"] is None and s["itl_ms"] is None  # nothing arrives before the whole answer
    assert 0 < s["e2e_ms"]["min"] <= s["e2e_ms"]["p50"] <= s["e2e_ms"]["max"]
    assert s["goodput_per_s"] == s["requests_per_s"]
    # greedy: the same inputs in the same order give the same answers, streamed or not
    tokens = [r["output_tokens"] for r in lv["records"]]
    assert sorted(tokens) == sorted(r["output_tokens"] for r in streamed["levels"][0]["records"])
    assert min(tokens) >= 1 and srv["generated_tokens"]["sum"] == s["output_tokens"] == sum(tokens)
    assert srv["requests_by_outcome"] == {"success": 16}
    assert compat["levels"][0]["summary"]["output_tokens"] == s["output_tokens"]
    assert metric(by_route, "attnserve_requests_total", route="/generate", outcome="success") == 16
    assert metric(by_route, "attnserve_requests_total", route="/", outcome="success") == 16
