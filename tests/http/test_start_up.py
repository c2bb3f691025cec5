"""Start-up as a new user meets it: a port already taken, by anything or by another attnserve, and `make demo`'s answer."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from service_harness import ROOT, free_port

BIN = Path(sys.executable).parent
VENV = BIN.parent


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, f"the server exited {proc.returncode}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "server did not become ready"
        time.sleep(0.1)


@pytest.fixture
def other_attnserve():
    """Another attnserve (the default model) already serving on a port: the port, and its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [str(BIN / "attnserve-serve"), "--port", str(port), "--threads", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield port, url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_make_demo(port: int, timeout_s: float = 60) -> tuple[int, str, float]:
    start = time.monotonic()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "demo", f"DEMO_PORT={port}", f"VENV={VENV}", "-o", f"{VENV}/bin/.installed-serve"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so a demo that keeps serving goes with it
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, time.monotonic() - start


def test_serve_on_a_taken_port_says_so_in_one_line_and_exits_2_before_starting():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        start = time.monotonic()
        proc = subprocess.run(
            [str(BIN / "attnserve-serve"), "--port", str(port)], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f":{port}" in lines[0], proc.stderr
    assert "ATTNSERVE_PORT" in lines[0] and "in use" in lines[0]
    assert elapsed < 10, f"took {elapsed:.1f}s: the port is checked before the bundle is loaded"


def test_make_demo_fails_naming_demo_port_when_another_attnserve_holds_the_port(other_attnserve):
    port, url = other_attnserve
    code, out, elapsed = run_make_demo(port)
    assert code != 0, out
    assert f"port {port} is already in use" in out and f"DEMO_PORT={port + 1}" in out, out
    assert "serving on" not in out and "generated_text" not in out, out
    assert elapsed < 15, f"make demo took {elapsed:.1f}s to fail"
    assert httpx.get(url + "/ready", timeout=5).status_code == 200  # the other server is left alone


def test_the_demo_helper_refuses_an_answer_from_a_process_it_did_not_start(other_attnserve):
    """The helper alone, given a server pid that is alive but does not hold the port (this test's own)."""
    port, url = other_attnserve
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnserve.service.demo_request",
            "--url",
            url,
            "--server-pid",
            str(os.getpid()),
            "--timeout-s",
            "10",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "DEMO_PORT" in out.stderr and out.stdout == "", out


def test_make_demo_prints_a_curl_command_that_answers_what_it_prints():
    port = free_port()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "demo", f"DEMO_PORT={port}", f"VENV={VENV}", "-o", f"{VENV}/bin/.installed-serve"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        for line in proc.stdout:  # the demo keeps serving: read until it says so
            lines.append(line.rstrip("\n"))
            if line.startswith("serving on"):
                break
        at = next(i for i, line in enumerate(lines) if line.startswith("$ curl "))
        argv = shlex.split(lines[at][2:])
        assert argv[:3] == ["curl", "-s", f"http://127.0.0.1:{port}/generate"], lines
        sent = json.loads(argv[argv.index("-d") + 1])
        printed = json.loads(lines[at + 1])
        assert sent == {"inputs": "attention", "parameters": {"max_new_tokens": 32}}
        assert printed == {"generated_text": "AH0 T EH1 N SH AH0 N", "details": None}
        assert httpx.post(argv[2], json=sent, timeout=30).text == lines[at + 1]  # the command, sent again, prints the same
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
