"""The project's Dockerfile, built and run for real on a Docker engine this test starts and stops.

No image can be pulled here, so a stand-in for `python:3.11-slim` is built locally: debootstrap's
minbase Debian bookworm with python3, imported into the engine and cached in its data root for the
next run. Only that test base gets the host's CA certificates (pip must reach the package index
inside the build); the project's Dockerfile stays as users run it. Everything runs with
`--network host` on 127.0.0.1: the engine has no bridge and touches no iptables.

Needs root and `make system-deps` (docker.io, debootstrap). Every process it starts, it stops.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"  # Debian's client: it builds with BuildKit (another client may come first on PATH)
# Kept between runs so the imported base image and the build cache survive (CI reuses its machine).
STATE_DIR = Path(os.environ.get("ATTNSERVE_TEST_DOCKER_DIR", "/var/lib/attnserve-test/docker"))
BASE_RAW = "attnserve-test/debian-minbase:bookworm"  # debootstrap output, imported once
BASE = "attnserve-test/python-base:bookworm"  # + the host's CA certificates: the BASE_IMAGE for the build
IMAGE = "attnserve-test/attnserve:cpu"
TINY_IMAGE = "attnserve-test/attnserve:tiny"  # built with the tiny test bundle in place of the default
LOADTEST_IMAGE = "attnserve-test/attnserve-loadtest"
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"
WORDS = ["attention", "hello", "transformer", "pronunciation", "zebra"]

pytestmark = [pytest.mark.system, pytest.mark.timeout(1800)]


@dataclass
class Docker:
    env: dict[str, str]
    logs: Path

    def __call__(self, *args: str, check: bool = True, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.run([DOCKER, *args], env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs)
        if check and proc.returncode != 0:
            pytest.fail(f"docker {' '.join(args[:3])} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def logged(self, name: str, *args: str, timeout: float, stdin=None) -> None:
        """Run a long docker command with its output in a log file; the tail shows when it fails."""
        log = self.logs / f"{name}.log"
        with open(log, "w") as out:
            rc = subprocess.run([DOCKER, *args], env=self.env, stdin=stdin, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        if rc.returncode != 0:
            pytest.fail(f"docker {name} failed ({rc.returncode}); end of {log}:\n{log.read_text()[-4000:]}")

    def image_exists(self, ref: str) -> bool:
        return self("image", "inspect", ref, check=False).returncode == 0

    def inspect(self, ref: str) -> dict:
        return json.loads(self("inspect", ref).stdout)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def debian_mirror() -> str:
    """The host's Debian mirror for DEBIAN_SUITE, from its apt sources (deb822 or one-line)."""
    sources = Path("/etc/apt")
    files = (
        sorted(sources.glob("sources.list.d/*.sources"))
        + [sources / "sources.list"]
        + sorted(sources.glob("sources.list.d/*.list"))
    )
    for path in files:
        text = path.read_text() if path.is_file() else ""
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if DEBIAN_SUITE in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                    return fields["URIs"].split()[0]
        for line in text.splitlines():
            parts = line.split("#")[0].split()
            if len(parts) >= 3 and parts[0] == "deb" and DEBIAN_SUITE in parts[2:3]:
                return next(p for p in parts[1:] if not p.startswith("["))
    return "http://deb.debian.org/debian"


def unmount_below(root: Path) -> None:
    """Unmount what dockerd left mounted under its exec root (the host network namespace's handle)."""
    points = [Path(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((p for p in points if p.is_relative_to(root)), key=lambda p: len(p.parts), reverse=True):
        subprocess.run(["umount", str(point)], check=True)


@pytest.fixture(scope="module")
def docker(tmp_path_factory):
    """A private dockerd: own data root (kept), exec root, socket and pid file; no bridge, no iptables."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    lock = open(STATE_DIR.parent / f"{STATE_DIR.name}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pytest.fail(f"another test run is using {STATE_DIR}; wait for it or set ATTNSERVE_TEST_DOCKER_DIR")
    logs = tmp_path_factory.mktemp("docker")
    run_dir = Path(tempfile.mkdtemp(prefix="attnserve-dockerd-", dir="/tmp"))  # short: a socket path has a length limit
    sock = run_dir / "docker.sock"
    cmd = [
        "dockerd",
        f"--data-root={STATE_DIR / 'data'}",
        f"--exec-root={run_dir / 'exec'}",
        f"--pidfile={run_dir / 'dockerd.pid'}",
        f"--host=unix://{sock}",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
    ]
    with open(logs / "dockerd.log", "w") as log:
        daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env |= {"DOCKER_HOST": f"unix://{sock}", "DOCKER_BUILDKIT": "1"}
    client = Docker(env, logs)
    try:
        deadline = time.monotonic() + 60
        while client("version", check=False, timeout=10).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not start; end of its log:\n{(logs / 'dockerd.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield client
    finally:
        # Keep the cached base image and a bounded build cache; drop what this run superseded.
        if daemon.poll() is None:
            client("image", "prune", "--force", check=False)
            client("builder", "prune", "--force", "--keep-storage", "3gb", check=False, timeout=300)
        daemon.terminate()  # by its PID; it stops its own containerd
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        unmount_below(run_dir)
        shutil.rmtree(run_dir)
        lock.close()


@pytest.fixture(scope="module")
def base_image(docker):
    """A local stand-in for python:3.11-slim (cached across runs), plus the host's CA certificates."""
    if not docker.image_exists(BASE_RAW):
        rootfs = STATE_DIR / "rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        log = docker.logs / "debootstrap.log"
        with open(log, "w") as out:
            cmd = ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", DEBIAN_SUITE, str(rootfs), debian_mirror()]
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=900)
        if proc.returncode != 0:
            pytest.fail(f"debootstrap failed; end of {log}:\n{log.read_text()[-3000:]}")
        # What slim images leave out: package caches, indexes, docs, man pages, translations.
        for pattern in (
            "var/cache/apt/archives/*.deb",
            "var/lib/apt/lists/*",
            "usr/share/doc/*",
            "usr/share/man/*",
            "usr/share/locale/*",
        ):
            for path in rootfs.glob(pattern):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        path_env = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        docker.logged(
            "import", "import", "--change", path_env, "--change", 'CMD ["python3"]', "-", BASE_RAW, timeout=300, stdin=tar.stdout
        )
        tar.wait()
        shutil.rmtree(rootfs)
    context = Path(tempfile.mkdtemp(dir=docker.logs))
    certs = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    lines = [f"FROM {BASE_RAW}"]
    if certs:
        for cert in certs:
            shutil.copy(cert, context / cert.name)
        lines += ["COPY *.crt /usr/local/share/ca-certificates/", "RUN update-ca-certificates"]
    lines += ["ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt"]  # pip's own bundle does not know the host's CAs
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    docker.logged("build-base", "build", "--network", "host", "-t", BASE, str(context), timeout=300)
    return BASE


@pytest.fixture(scope="module")
def image(docker, base_image):
    """The project's Dockerfile, CPU flavour, built on the stand-in base exactly as users build it."""
    assert (REPO / "models" / "g2p-en" / "bundle.json").is_file(), "models/g2p-en, the bundle the image bakes in, is missing"
    build_args = ["--build-arg", f"BASE_IMAGE={base_image}", "--build-arg", "FLAVOUR=cpu"]
    docker.logged("build", "build", "--network", "host", *build_args, "-t", IMAGE, str(REPO), timeout=1200)
    size = docker.inspect(IMAGE)["Size"]
    base_size = docker.inspect(base_image)["Size"]
    print(f"\n{IMAGE}: {size / 1e6:.0f} MB, of which the base {base_size / 1e6:.0f} MB")
    return IMAGE


def start_container(
    docker: Docker, name: str, *run_args: str, env: dict[str, str] | None = None, image: str = IMAGE
) -> tuple[str, str]:
    """Run `image` on a free loopback port of the host's network; returns (name, base URL)."""
    port = free_port()
    docker("rm", "--force", name, check=False)
    settings = {"ATTNSERVE_HOST": "127.0.0.1", "ATTNSERVE_PORT": str(port)} | (env or {})
    env_args = [a for k, v in settings.items() for a in ("--env", f"{k}={v}")]
    docker("run", "--detach", "--name", name, "--network", "host", *run_args, *env_args, image)
    return name, f"http://127.0.0.1:{port}"


def wait_ready(docker: Docker, name: str, url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if not docker.inspect(name)["State"]["Running"]:
            break
        time.sleep(0.3)
    pytest.fail(f"{name} never became ready; its log:\n{docker('logs', name, check=False).stderr[-3000:]}")


@pytest.fixture(scope="module")
def container(docker, image):
    name, url = start_container(docker, "attnserve-test-serve")
    try:
        wait_ready(docker, name, url)
        yield name, url
    finally:
        docker("rm", "--force", name, check=False)


def scrape(url: str) -> dict[str, list]:
    """Samples of the /metrics exposition, by sample name."""
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_image_holds_only_the_service_and_runs_as_non_root(docker, image):
    config = docker.inspect(image)["Config"]
    assert config["User"] and config["User"].split(":")[0] not in ("", "0", "root")
    assert "ATTNSERVE_HOST=0.0.0.0" in config["Env"]
    assert "8000/tcp" in config["ExposedPorts"]
    assert config["Healthcheck"]["Test"][:2] == ["CMD", "python3"]
    probe = (
        "import importlib.util as u, json, os, shutil, sys\n"
        "print(json.dumps({\n"
        "    'modules': {m: u.find_spec(m) is not None for m in sys.argv[1:]},\n"
        "    'tools': [t for t in ('gcc', 'cc', 'g++', 'make', 'curl') if shutil.which(t)],\n"
        "    'scripts': sorted(s for s in os.listdir(os.path.dirname(sys.executable)) if s.startswith('attnserve-')),\n"
        "    'tests': os.path.exists('tests'),\n"
        "}))\n"
    )
    wanted = ["attnserve.service", "onnxruntime", "uvicorn"]
    unwanted = ["torch", "attnserve.training", "attnserve.export", "pytest", "pip", "service", "training", "export"]
    out = json.loads(
        docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", probe, *wanted, *unwanted).stdout
    )
    assert out["modules"] == {m: m in wanted for m in wanted + unwanted}, out
    assert out["tools"] == [] and not out["tests"], out
    # Console scripts of packages left out of the image are gone with them.
    assert "attnserve-serve" in out["scripts"] and not {"attnserve-train", "attnserve-export"} & set(out["scripts"])


def test_container_serves_the_default_model(container, tmp_path):
    from attnserve.service.client import Generator

    _, url = container
    texts = []
    for word in WORDS:  # the model's own answer: the bundle's lexicon would answer dictionary words
        r = httpx.post(f"{url}/generate", json={"inputs": word, "parameters": {"lexicon": False}}, timeout=30)
        assert r.status_code == 200, r.text
        texts.append(r.json()["generated_text"])
    # The image serves the very bundle baked from models/g2p-en: greedy output equals the host's engine on it.
    with Generator(REPO / "models" / "g2p-en", threads=1) as reference:
        assert texts == [result.text for result in reference.generate_many(WORDS)]
    assert all(texts)
    # ... with its lexicon: a dictionary word answers CMUdict's first pronunciation, and says so
    r = httpx.post(f"{url}/generate", json={"inputs": "Hello", "parameters": {"details": True}}, timeout=30)
    assert r.json()["generated_text"] == "HH AH0 L OW1" and r.json()["details"]["source"] == "lexicon", r.text


def test_container_metrics_scrape(container):
    _, url = container
    body = {"inputs": "metrics", "parameters": {"lexicon": False}}  # through the engine, so its metrics move
    httpx.post(f"{url}/generate", json=body, timeout=30).raise_for_status()
    samples = scrape(url)
    model_id = json.loads((REPO / "models" / "g2p-en" / "bundle.json").read_text())["model_id"]
    done = [s for s in samples["attnserve_requests_total"] if s.labels["outcome"] == "success"]
    assert done and all(s.labels["model"] == model_id for s in done) and sum(s.value for s in done) >= 1
    assert samples["attnserve_time_to_first_token_seconds_count"][0].value >= 1
    assert "attnserve_queue_size" in samples


def test_container_ships_the_demo_page(container):
    # Package data (service/static) must survive the non-editable install into the image's venv.
    _, url = container
    for path in ("/demo", "/demo/static/demo.js", "/demo/static/demo.css"):
        r = httpx.get(f"{url}{path}", timeout=10)
        assert r.status_code == 200 and r.content, path


def test_container_reports_healthy_and_its_process_is_not_root(docker, container):
    name, _ = container
    deadline = time.monotonic() + 90  # the first check runs one interval (10 s) after the start
    while (health := docker.inspect(name)["State"]["Health"])["Status"] != "healthy":
        assert health["Status"] == "starting" and time.monotonic() < deadline, json.dumps(health)[-2000:]
        time.sleep(1)
    pid = docker.inspect(name)["State"]["Pid"]
    uids = re.search(r"^Uid:\s+(.*)$", Path(f"/proc/{pid}/status").read_text(), re.M).group(1).split()
    assert len(uids) == 4 and "0" not in uids  # real, effective, saved and filesystem uid


def test_loadtest_image_measures_the_container(docker, base_image, container):
    # The Dockerfile's `loadtest` target, as the compose stack's loadtest profile runs it.
    build_args = ["--build-arg", f"BASE_IMAGE={base_image}"]
    docker.logged(
        "build-loadtest",
        "build",
        "--network",
        "host",
        *build_args,
        "--target",
        "loadtest",
        "-t",
        LOADTEST_IMAGE,
        str(REPO),
        timeout=900,
    )
    _, url = container
    args = [url, "--concurrency", "2", "--requests", "10", "--no-plots", "--no-progress", "--out", "/tmp/loadtest"]
    proc = docker("run", "--rm", "--network", "host", LOADTEST_IMAGE, *args, timeout=300)
    out = proc.stdout + proc.stderr
    assert "c=2: 10 ok, 0 failed" in out and "TTFT p50" in out, out[-3000:]


def test_docker_stop_drains_in_flight_requests_and_exits_cleanly(docker, image):
    # One batch slot and a tenth of a CPU make the queue long enough that SIGTERM lands while
    # requests are still waiting and running; sampling at a high temperature keeps each one long.
    n = 12
    name, url = start_container(
        docker,
        "attnserve-test-drain",
        "--cpus=0.1",
        env={"ATTNSERVE_MAX_BATCH_SIZE": "1", "ATTNSERVE_THREADS": "1", "ATTNSERVE_DRAIN_TIMEOUT_S": "120"},
    )
    try:
        wait_ready(docker, name, url)
        params = {"do_sample": True, "temperature": 20.0, "details": True}

        def in_server() -> float:
            s = scrape(url)
            done = sum(x.value for x in s.get("attnserve_requests_total", []))
            return done + s["attnserve_queue_size"][0].value + s["attnserve_running_sequences"][0].value

        baseline = in_server()
        with httpx.Client(timeout=300) as client, concurrent.futures.ThreadPoolExecutor(n) as pool:

            def generate(i: int) -> tuple[int, dict, float]:
                r = client.post(f"{url}/generate", json={"inputs": WORDS[i % len(WORDS)], "parameters": params | {"seed": i}})
                return r.status_code, r.json(), time.monotonic()

            futures = [pool.submit(generate, i) for i in range(n)]
            deadline = time.monotonic() + 60
            while in_server() - baseline < n:  # every request has reached the server
                assert time.monotonic() < deadline, "the requests never all reached the server"
                time.sleep(0.05)
            assert scrape(url)["attnserve_queue_size"][0].value >= 1, "nothing left in flight to drain; slow the container"
            sigterm_at = time.monotonic()
            stopped: list[subprocess.CompletedProcess] = []
            stop = threading.Thread(
                target=lambda: stopped.append(docker("stop", "--time", "180", name, check=False, timeout=200))
            )
            stop.start()
            # Draining: readiness drops and new generation requests are turned away with 503 `draining`.
            while httpx.get(f"{url}/ready", timeout=10).status_code == 200:
                assert time.monotonic() - sigterm_at < 30, "/ready still 200 long after SIGTERM"
                time.sleep(0.05)
            late = httpx.post(f"{url}/generate", json={"inputs": "late"}, timeout=30)
            assert late.status_code == 503 and late.json()["error_type"] == "draining", late.text
            results = [f.result() for f in futures]
            stop.join()
        assert stopped and stopped[0].returncode == 0, stopped
        assert [status for status, _, _ in results] == [200] * n, results
        assert all(body["details"]["generated_tokens"] >= 1 for _, body, _ in results)
        assert sum(finished > sigterm_at for _, _, finished in results) >= 1, "no request was in flight at SIGTERM"
        state = docker.inspect(name)["State"]
        assert (state["Status"], state["ExitCode"], state["OOMKilled"]) == ("exited", 0, False)
    finally:
        docker("rm", "--force", name, check=False)


# ---- any bundle: the tiny test bundle in place of the default, at run time and at build time, behind nginx


@pytest.fixture(scope="module")
def tiny_bundle_for_containers(tiny_bundle_dir):
    """A copy of the tiny test bundle that the image's user (uid 10001) can read: pytest's own folders are
    root's alone."""
    root = Path(tempfile.mkdtemp(prefix="attnserve-own-bundle-", dir="/tmp"))
    bundle = root / "g2p-tiny"
    shutil.copytree(tiny_bundle_dir, bundle)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        yield bundle
    finally:
        shutil.rmtree(root)


@pytest.fixture
def behind_nginx(tmp_path):
    """Start Debian's nginx with the repository's nginx.conf in front of one replica; yields a function
    (replica URL -> nginx URL). Stopped afterwards."""
    from test_topology import nginx_config, stop, wait_for

    procs = []

    def start(replica_url: str) -> str:
        port = free_port()
        conf = tmp_path / "nginx.conf"
        conf.write_text(nginx_config([int(replica_url.rsplit(":", 1)[1])], port))
        log = tmp_path / "nginx.log"
        cmd = ["nginx", "-c", str(conf), "-p", str(tmp_path), "-g", f"daemon off; pid {tmp_path / 'nginx.pid'};"]
        procs.append(subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        wait_for(f"{url}/nginx-health", "nginx", procs[-1], log)
        return url

    try:
        yield start
    finally:
        for proc in procs:
            stop(proc)


def assert_serves_the_tiny_bundle(url: str, bundle: Path) -> None:
    """Through `url`: /info names the tiny bundle, greedy answers equal the host's engine on it, /samples are its own."""
    from attnserve.service.client import Generator

    info = httpx.get(f"{url}/info", timeout=30).json()
    assert info["model_id"] == json.loads((bundle / "bundle.json").read_text())["model_id"] == "g2p-tiny", info
    texts = []
    for word in WORDS:
        r = httpx.post(f"{url}/generate", json={"inputs": word, "parameters": {"lexicon": False}}, timeout=30)
        assert r.status_code == 200, r.text
        texts.append(r.json()["generated_text"])
    with Generator(bundle, threads=1) as reference:
        assert texts == [result.text for result in reference.generate_many(WORDS)]
    samples = httpx.get(f"{url}/samples", timeout=30).json()["samples"]
    assert samples and set(samples) <= set(json.loads((bundle / "parity_corpus.json").read_text())["sources"])


def test_image_serves_a_bundle_mounted_at_run_time_behind_nginx(docker, image, tiny_bundle_for_containers, behind_nginx):
    bundle = tiny_bundle_for_containers
    name, url = start_container(
        docker,
        "attnserve-test-own-mounted",
        "--volume",
        f"{bundle}:/bundles/g2p-tiny:ro",
        env={"ATTNSERVE_BUNDLE": "/bundles/g2p-tiny"},
    )
    try:
        wait_ready(docker, name, url)
        assert_serves_the_tiny_bundle(behind_nginx(url), bundle)
    finally:
        docker("rm", "--force", name, check=False)


def build_context_with(bundle: Path, context: Path) -> Path:
    """The image's build context as .dockerignore lets it through (the default bundle left out), with `bundle`
    at bundles/NAME: a bundle of one's own, where the Dockerfile's BUNDLE_DIR takes it from."""
    context.mkdir(parents=True)
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, context / name)
    for name in ("service", "loadtest", "export", "training"):
        shutil.copytree(REPO / name, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(REPO / "attnserve", context / "attnserve", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(bundle, context / "bundles" / bundle.name)
    return context


def test_image_built_with_another_bundle_serves_it_behind_nginx(
    docker, base_image, tiny_bundle_for_containers, behind_nginx, tmp_path
):
    bundle = tiny_bundle_for_containers
    context = build_context_with(bundle, tmp_path / "context")
    build_args = ["--build-arg", f"BASE_IMAGE={base_image}", "--build-arg", f"BUNDLE_DIR=bundles/{bundle.name}"]
    docker.logged("build-tiny", "build", "--network", "host", *build_args, "-t", TINY_IMAGE, str(context), timeout=1200)
    assert "ATTNSERVE_BUNDLE=/opt/attnserve/bundle" in docker.inspect(TINY_IMAGE)["Config"]["Env"]
    name, url = start_container(docker, "attnserve-test-own-baked", image=TINY_IMAGE)
    try:
        wait_ready(docker, name, url)
        assert_serves_the_tiny_bundle(behind_nginx(url), bundle)
    finally:
        docker("rm", "--force", name, check=False)


def test_kubernetes_init_container_copies_the_images_bundle_into_the_bundle_volume(docker, image, tmp_path):
    # deploy/k8s/deployment.yaml's init container, as written (the service image, its command, uid 10001),
    # filling an empty volume; what it leaves there is the baked-in bundle, which the service then loads.
    import yaml

    from attnserve.service.engine.bundle import load_bundle

    pod = next(
        doc
        for doc in yaml.safe_load_all((REPO / "deploy" / "k8s" / "deployment.yaml").read_text())
        if doc and doc["kind"] == "Deployment"
    )["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (mount,) = init["volumeMounts"]
    volume = Path(tempfile.mkdtemp(prefix="attnserve-bundle-volume-", dir="/tmp"))
    try:
        volume.chmod(0o777)  # an emptyDir is writable by the pod's user
        docker(
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            "10001:10001",
            "--read-only",
            "--volume",
            f"{volume}:{mount['mountPath']}",
            "--entrypoint",
            init["command"][0],
            image,
            *init["command"][1:],
        )
        assert (volume / "bundle.json").read_bytes() == (REPO / "models" / "g2p-en" / "bundle.json").read_bytes()
        assert load_bundle(volume).model_id == json.loads((REPO / "models" / "g2p-en" / "bundle.json").read_text())["model_id"]
    finally:
        shutil.rmtree(volume)
