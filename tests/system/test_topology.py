"""The compose topology for real, without images: two service replicas as local processes, Debian's
nginx with the repository's nginx config and Debian's Prometheus with the repository's scrape config.

Only the addresses change: the upstream and scrape targets point at the replicas' loopback ports
instead of Compose's DNS name, and each target gets the `namespace`/`pod` labels Kubernetes service
discovery would attach, so the autoscaler's adapter rule can be evaluated as the adapter would.
Load goes through nginx with `attnserve-loadtest`. Needs root and `make system-deps`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRAPE_INTERVAL_S = 5  # the repository's, unchanged
NAMESPACE = "attnserve"

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(900)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, what: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"{what} did not come up at {url}; end of {log}:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def nginx_config(replica_ports: list[int], listen_port: int) -> str:
    """The repository's nginx.conf with its upstream server and listen address on loopback."""
    text = (REPO / "deploy" / "nginx" / "nginx.conf").read_text()
    text, n_server = re.subn(
        r"^(\s*)server attnserve:8000(.*);$",
        lambda m: "\n".join(f"{m.group(1)}server 127.0.0.1:{p}{m.group(2)};" for p in replica_ports),
        text,
        flags=re.M,
    )
    text, n_listen = re.subn(r"^(\s*)listen 8080;$", rf"\g<1>listen 127.0.0.1:{listen_port};", text, flags=re.M)
    assert (n_server, n_listen) == (1, 1), "deploy/nginx/nginx.conf changed shape: update this test's rewrite"
    return text


def prometheus_config(replica_ports: list[int], prometheus_port: int) -> dict:
    """The repository's prometheus.yml with static loopback targets in place of Compose's DNS discovery."""
    config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"attnserve", "prometheus"} and "dns_sd_configs" in jobs["attnserve"]
    del jobs["attnserve"]["dns_sd_configs"]
    jobs["attnserve"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE, "pod": f"attnserve-{i}"}}
        for i, port in enumerate(replica_ports)
    ]
    jobs["prometheus"]["static_configs"] = [{"targets": [f"127.0.0.1:{prometheus_port}"]}]
    assert config["global"]["scrape_interval"] == f"{SCRAPE_INTERVAL_S}s"
    return config


def loadtest(url: str, out: Path, *args: str) -> subprocess.Popen:
    """attnserve-loadtest through nginx: sampled (so answers run long and TTFT/e2e differ), no plots."""
    cmd = [sys.executable, "-m", "attnserve.loadtest", url, "--concurrency", "4", "--max-new-tokens", "48", "--do-sample"]
    cmd += ["--temperature", "20", "--timeout", "60", "--no-metrics", "--no-plots", "--no-progress", "--out", str(out), *args]
    return subprocess.Popen(cmd, stdout=open(out.with_suffix(".log"), "w"), stderr=subprocess.STDOUT)


def loadtest_summary(proc: subprocess.Popen, out: Path) -> dict:
    rc = proc.wait(timeout=300)
    assert rc == 0, out.with_suffix(".log").read_text()[-3000:]
    (level,) = json.loads((out / "results.json").read_text())["levels"]
    return level["summary"]


def promql(prom: str, query: str) -> list[dict]:
    body = httpx.get(f"{prom}/api/v1/query", params={"query": query}, timeout=10).json()
    assert body["status"] == "success", f"{query}: {body}"
    return body["data"]["result"]


def dashboard() -> dict:
    return json.loads((REPO / "deploy" / "grafana" / "dashboards" / "attnserve.json").read_text())


def model_variable() -> dict:
    (variable,) = dashboard()["templating"]["list"]
    assert variable["name"] == "model"
    return variable


def dashboard_queries() -> list[str]:
    exprs = [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]
    # Grafana's variables, as it would fill them in: the rate window and the "All" model choice.
    fill = {"$__rate_interval": "1m", "$model": model_variable()["allValue"]}
    for name, value in fill.items():
        exprs = [e.replace(name, value) for e in exprs]
    assert not [e for e in exprs if "$" in e], "a dashboard variable this test does not fill in"
    return exprs


def adapter_rule() -> dict:
    for doc in yaml.safe_load_all((REPO / "deploy" / "k8s" / "prometheus-adapter" / "config.yaml").read_text()):
        (rule,) = [r for r in yaml.safe_load(doc["data"]["config.yaml"])["rules"] if r["name"]["as"] == "attnserve_queue_size"]
        return rule
    raise AssertionError("no adapter rule")


@pytest.fixture
def topology(tiny_bundle_dir, tmp_path):
    procs: dict[str, subprocess.Popen] = {}
    replica_ports = [free_port(), free_port()]
    nginx_port, prom_port = free_port(), free_port()
    try:
        for i, port in enumerate(replica_ports):
            env = dict(os.environ, ATTNSERVE_HOST="127.0.0.1", ATTNSERVE_PORT=str(port), ATTNSERVE_THREADS="1")
            log = tmp_path / f"replica-{i}.log"
            cmd = [sys.executable, "-m", "attnserve.service", str(tiny_bundle_dir)]
            procs[f"replica-{i}"] = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        for i, port in enumerate(replica_ports):
            wait_for(f"http://127.0.0.1:{port}/ready", f"replica {i}", procs[f"replica-{i}"], tmp_path / f"replica-{i}.log")

        conf = tmp_path / "nginx.conf"
        conf.write_text(nginx_config(replica_ports, nginx_port))
        log = tmp_path / "nginx.log"
        cmd = ["nginx", "-c", str(conf), "-p", str(tmp_path), "-g", f"daemon off; pid {tmp_path / 'nginx.pid'};"]
        procs["nginx"] = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        nginx = f"http://127.0.0.1:{nginx_port}"
        wait_for(f"{nginx}/nginx-health", "nginx", procs["nginx"], log)

        prom_conf = tmp_path / "prometheus.yml"
        prom_conf.write_text(yaml.safe_dump(prometheus_config(replica_ports, prom_port)))
        check = subprocess.run(["promtool", "check", "config", str(prom_conf)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        log = tmp_path / "prometheus.log"
        cmd = ["prometheus", f"--config.file={prom_conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        cmd += [f"--web.listen-address=127.0.0.1:{prom_port}"]
        procs["prometheus"] = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        prom = f"http://127.0.0.1:{prom_port}"
        wait_for(f"{prom}/-/ready", "prometheus", procs["prometheus"], log)

        yield {"nginx": nginx, "prometheus": prom, "replicas": replica_ports, "procs": procs, "dir": tmp_path}
    finally:
        # nginx first (no new requests), then the replicas, then Prometheus.
        for name in ["nginx", *[n for n in procs if n.startswith("replica")], "prometheus"]:
            if name in procs:
                stop(procs[name])


def test_nginx_balances_streams_and_survives_a_replica_kill(topology):
    nginx, prom, procs, tmp = topology["nginx"], topology["prometheus"], topology["procs"], topology["dir"]
    replicas = [f"http://127.0.0.1:{p}" for p in topology["replicas"]]

    # Both replicas scraped and up before anything else happens.
    deadline = time.monotonic() + 6 * SCRAPE_INTERVAL_S
    while len(up := [r for r in promql(prom, 'up{job="attnserve"}') if r["value"][1] == "1"]) < 2:
        assert time.monotonic() < deadline, f"Prometheus does not see both replicas up: {up}"
        time.sleep(1)
    assert {r["metric"]["pod"] for r in up} == {"attnserve-0", "attnserve-1"}

    # One request each replica turns away, so the errors-by-type panel has a series that outlives the kill.
    for url in [nginx, *replicas]:
        bad = httpx.post(f"{url}/generate", json={"inputs": "x", "parameters": {"max_new_tokens": 0}}, timeout=10)
        assert bad.status_code == 422 and bad.json()["error_type"] == "validation"

    # Phase 1, both replicas: streams come through nginx token by token, and both replicas serve.
    before = [httpx.get(f"{r}/metrics", timeout=10).text for r in replicas]
    phase1 = loadtest_summary(loadtest(nginx, tmp / "phase1", "--requests", "40"), tmp / "phase1")
    assert phase1["ok"] == phase1["requests"] == 40 and phase1["failed"] == 0, phase1["error_samples"]
    assert phase1["output_tokens_per_request"]["mean"] >= 8
    # Unbuffered streaming: the first token arrives well before the answer is complete (a buffering proxy would
    # hand over the whole stream at its end, TTFT ~ e2e). A decoder step is well under a millisecond, so the costs
    # before the first token (queue, encoder, nginx) are a large part of e2e: TTFT was 0.52 of e2e in one CI run.
    assert phase1["ttft_ms"]["p50"] < 0.8 * phase1["e2e_ms"]["p50"], (phase1["ttft_ms"], phase1["e2e_ms"])
    after = [httpx.get(f"{r}/metrics", timeout=10).text for r in replicas]
    served = [successes(a) - successes(b) for a, b in zip(after, before)]
    assert all(n >= 5 for n in served) and sum(served) >= 40, f"least_conn should spread the load: {served}"

    # Phase 2: replica 0 dies (SIGKILL) in the middle of the load.
    out2 = tmp / "phase2"
    load = loadtest(nginx, out2, "--duration", "8")
    time.sleep(3)
    procs["replica-0"].send_signal(signal.SIGKILL)
    procs["replica-0"].wait(timeout=10)
    phase2 = loadtest_summary(load, out2)
    # Only the streams cut on the killed replica may fail; nginx sends the rest to the survivor.
    assert phase2["ok"] >= 10 and phase2["failed"] <= 4, (phase2["ok"], phase2["errors"], phase2["error_samples"])

    # Phase 3, after the kill: every request succeeds through the surviving replica.
    phase3 = loadtest_summary(loadtest(nginx, tmp / "phase3", "--requests", "30"), tmp / "phase3")
    assert phase3["ok"] == 30 and phase3["failed"] == 0, phase3["error_samples"]

    # Every PromQL query of the Grafana dashboard returns data, with finite values from the load. A rate needs two
    # scrapes of a series, and every series was born during the load, when a scrape of the one replica left may time
    # out on a loaded machine (one CI run found no data at once): each query gets a few scrape intervals to show it.
    deadline = time.monotonic() + 4 * SCRAPE_INTERVAL_S
    for expr in dashboard_queries():
        while not (result := promql(prom, expr)) and time.monotonic() < deadline:
            time.sleep(1)
        assert result, f"no data for dashboard query {expr}"
        assert any(math.isfinite(float(r["value"][1])) for r in result), f"{expr}: {result}"
    # ... and so does its $model variable, `label_values(METRIC, LABEL)`, which Grafana asks as below.
    metric, label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", model_variable()["query"]).groups()
    values = httpx.get(f"{prom}/api/v1/label/{label}/values", params={"match[]": metric}, timeout=10)
    assert values.json()["data"], "the dashboard's $model variable would offer nothing"

    # The autoscaler's metric: the adapter's series query and its metrics query, templated as it does.
    rule = adapter_rule()
    series = httpx.get(f"{prom}/api/v1/series", params={"match[]": rule["seriesQuery"]}, timeout=10).json()["data"]
    pods = sorted({s["pod"] for s in series})
    assert pods == ["attnserve-0", "attnserve-1"], series
    query = (
        rule["metricsQuery"]
        .replace("<<.Series>>", "attnserve_queue_size")
        .replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod=~"{"|".join(pods)}"')
        .replace("<<.GroupBy>>", "pod")
    )
    result = promql(prom, query)
    assert {r["metric"]["pod"] for r in result} == set(pods), result
    assert all(math.isfinite(float(r["value"][1])) and float(r["value"][1]) >= 0 for r in result)


def successes(metrics_text: str) -> float:
    return sum(
        float(v) for v in re.findall(r'^attnserve_requests_total\{[^}]*outcome="success"[^}]*\} (\S+)$', metrics_text, re.M)
    )


@pytest.fixture
def nginx_before_one_replica(tiny_bundle_dir, tmp_path):
    """One replica behind the repository's nginx.conf, with both idle timeouts scaled down (nginx's upstream
    3 s, the replica's 4 s) in the config's order: nginx closes an idle upstream connection first."""
    procs: dict[str, subprocess.Popen] = {}
    replica_port, nginx_port = free_port(), free_port()
    try:
        log = tmp_path / "replica.log"
        cmd = [sys.executable, "-m", "attnserve.service", str(tiny_bundle_dir), "--port", str(replica_port), "--threads", "1"]
        cmd += ["--max-concurrent-requests", "512", "--keepalive-timeout-s", "4", "--log-level", "warning"]
        procs["replica"] = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        wait_for(f"http://127.0.0.1:{replica_port}/ready", "replica", procs["replica"], log)

        text, n = re.subn(
            r"^(\s*)keepalive_timeout \d+s;$", r"\g<1>keepalive_timeout 3s;", nginx_config([replica_port], nginx_port), flags=re.M
        )
        assert n == 1, "deploy/nginx/nginx.conf changed shape: update this test's rewrite"
        conf = tmp_path / "nginx.conf"
        conf.write_text(text)
        log = tmp_path / "nginx.log"
        cmd = ["nginx", "-c", str(conf), "-p", str(tmp_path), "-g", f"daemon off; pid {tmp_path / 'nginx.pid'};"]
        procs["nginx"] = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        nginx = f"http://127.0.0.1:{nginx_port}"
        wait_for(f"{nginx}/nginx-health", "nginx", procs["nginx"], log)
        yield nginx
    finally:
        for name in ("nginx", "replica"):
            if name in procs:
                stop(procs[name])


def test_no_request_is_lost_through_nginx_on_connections_idle_around_either_expiry(nginx_before_one_replica):
    """Clients reuse connections to nginx after idling just under httpx's 5 s, and nginx reuses its upstream
    connections after idling around its own (scaled) upstream timeout: every request is answered.

    With the order reversed (replica 2 s, nginx 3 s) this still passes: nginx resends a request whose cached
    upstream connection failed (`proxy_next_upstream error ... non_idempotent`), so through this config the
    timeouts' order is a second guard; test_deploy_static checks it."""
    from test_keepalive import HTTPX_EXPIRY_S, JUST_UNDER_HTTPX, Tally, httpx_connection, httpx_pool_after_bursts

    nginx, tally = nginx_before_one_replica, Tally()

    async def run() -> None:
        await asyncio.gather(
            *(httpx_connection(nginx, tally, 5, 4, JUST_UNDER_HTTPX) for _ in range(16)),
            *(httpx_connection(nginx, tally, 8, 4, (2.9, 3.1)) for _ in range(16)),  # around nginx's upstream expiry
            httpx_pool_after_bursts(nginx, tally, 4, 300, (HTTPX_EXPIRY_S - 0.1, HTTPX_EXPIRY_S + 0.05)),
        )

    asyncio.run(run())
    assert not tally.lost, f"{sum(tally.lost.values())} of {tally.sent} requests lost: {tally.lost.most_common(5)}"
    assert tally.sent >= 1500
