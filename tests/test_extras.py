"""A command whose optional dependencies are missing says so in one line: the extra, and how to install it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# every console script, the extra whose absence it names, and a module of that extra
COMMANDS = [
    ("attnserve-loadtest", "loadtest", "aiohttp"),
    ("attnserve-train", "train", "torch"),
    ("attnserve-eval", "train", "torch"),
    ("attnserve-export", "train", "torch"),
    ("attnserve-bench", "train", "torch"),
    ("attnserve-serve", "serve", "fastapi"),
    ("attnserve-generate", "serve", "fastapi"),
]


def run_without_site_packages(script: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The installed console script under this venv's python with no site-packages (-S): only the standard library
    and the checkout, as in an install that lacks every extra."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-S", str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(("prog", "extra", "module"), COMMANDS)
def test_a_command_without_its_extra_prints_one_line_naming_it(prog, extra, module):
    out = run_without_site_packages(BIN / prog, "--help")
    assert out.returncode == 2, out
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr  # no traceback
    assert f"needs the '{extra}' extra ({module} is not installed)" in lines[0]
    assert lines[0].endswith(f".venv/bin/pip install -e '.[{extra}]'") or f"-e '.[{extra}]'" in lines[0]
    if BIN.is_relative_to(ROOT):  # the checkout's own .venv, as `make` sets it up: the exact command to paste
        assert f"install it with: {BIN.relative_to(ROOT)}/pip install -e '.[{extra}]'" in lines[0]


def test_the_install_line_says_where_to_run_it_from_elsewhere(tmp_path):
    out = run_without_site_packages(BIN / "attnserve-loadtest", "--help", cwd=tmp_path)
    assert out.returncode == 2
    assert f"cd {ROOT} && " in out.stderr


def test_python_dash_m_says_the_same():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-S", "-m", "attnserve.loadtest", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "needs the 'loadtest' extra" in out.stderr and "Traceback" not in out.stderr


def test_with_its_extra_the_command_runs():
    out = subprocess.run([str(BIN / "attnserve-loadtest"), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "usage: attnserve-loadtest" in out.stdout


def test_the_docs_install_extras_from_the_checkout():
    """The package is on no index: `pip install 'attnserve[x]'` fails, so the docs say `pip install -e '.[x]'`."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert not re.search(r"pip install[^`\n]*'attnserve\[", text), f"{doc.name} installs attnserve from an index"
        for extra in re.findall(r"pip install -e '\.\[([a-z,]+)\]'", text):
            assert set(extra.split(",")) <= {"cpu", "serve", "gpu", "train", "dev", "loadtest", "hf"}, (doc.name, extra)


def test_the_code_names_extras_as_the_checkout_installs_them():
    """Messages and help that say how to install an extra say it from the checkout (the package is on no index)."""
    for package in ("service", "training", "export", "loadtest"):
        for source in sorted((ROOT / package).rglob("*.py")):
            text = source.read_text()
            assert not re.search(r"pip install[^\n]*'attnserve\[", text), f"{source.relative_to(ROOT)} installs from an index"
