"""The core wheel, as `make wheels` builds it: one top-level package (attnserve) with the default model inside, a core
without the web stack, torch or plots, that phonemizes from any directory in a fresh venv holding only its own
dependencies, and whose server command names the serve extra it lacks."""

from __future__ import annotations

import email
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_CORE = ("fastapi", "fastapi-offline", "uvicorn", "starlette", "pydantic", "pydantic-settings", "torch", "matplotlib")
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "attnserve", "service", "training", "export", "loadtest"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the checkout's sources (its links kept), so no build/ of the checkout is used."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        if (ROOT / name).is_dir() and not (ROOT / name).is_symlink():
            shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "models" / "g2p-en", src / "models" / "g2p-en")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w", str(out)]
    proc = subprocess.run(build, capture_output=True, text=True, timeout=600, cwd=src)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("attnserve-*.whl")
    return path


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_string(z.read(name).decode())


def core_requirements(wheel: Path) -> list[str]:
    """The distribution names the core requires (no extra's)."""
    return [
        re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower()
        for r in metadata(wheel).get_all("Requires-Dist")
        if "extra ==" not in r
    ]


def test_the_wheel_installs_attnserve_alone_with_the_default_model(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert {n.split("/")[0] for n in names} == {"attnserve", wheel.name.split("-py3")[0] + ".dist-info"}
    assert {n.split("/")[1] for n in names if n.startswith("attnserve/") and n.count("/") > 1} >= {
        "service",
        "training",
        "export",
        "loadtest",
        "models",
    }
    listed = json.loads((ROOT / "models" / "g2p-en" / "bundle.json").read_text())["files"]
    assert {f"attnserve/models/g2p-en/{f}" for f in [*listed, "bundle.json"]} <= set(names)


def test_the_core_requires_no_web_stack_torch_or_plots(wheel):
    core = core_requirements(wheel)
    assert {"onnxruntime", "numpy", "tokenizers"} <= set(core)
    assert not set(core) & set(NOT_CORE), core
    extras = metadata(wheel).get_all("Provides-Extra")
    assert {"cpu", "serve", "gpu", "train", "loadtest", "dev"} <= set(extras)


def dependency_closure(names: list[str]) -> list[importlib.metadata.Distribution]:
    """These installed distributions and everything they require (markers of this interpreter, no extras)."""
    from packaging.requirements import Requirement

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[name] = dist
        for req in map(Requirement, dist.requires or []):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def link_distributions(dists: list[importlib.metadata.Distribution], into: Path) -> None:
    """A site directory holding only these distributions: links to their top-level files and folders."""
    into.mkdir()
    for dist in dists:
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(dist.locate_file(top))
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)


def test_a_fresh_venv_with_the_core_alone_phonemizes_from_any_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    deps = tmp_path / "core-deps"
    link_distributions(dependency_closure(core_requirements(wheel)), deps)
    code = (
        "import importlib.util, attnserve\n"
        "first, second = attnserve.phonemize('Dr. Smith arrived at 5 p.m. He paid $5.')\n"
        "assert first.text.startswith('Dr. Smith') and first.phonemes.endswith('.'), first\n"
        "assert first.words[0].source == 'lexicon' and (first.words[0].start, first.words[0].end) == (0, 2)\n"
        "assert attnserve.Phonemizer.__module__ == 'attnserve.service.phonemizer'\n"
        "print(attnserve.service.engine.bundle.PACKAGED_BUNDLE)\n"
        "for name in ('fastapi', 'uvicorn', 'pydantic', 'torch', 'service', 'training', 'export', 'loadtest'):\n"
        "    assert importlib.util.find_spec(name) is None, name\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSERVE_", "PYTHON", "VIRTUAL_ENV"))}
    env |= {"PYTHONPATH": str(deps), "ATTNSERVE_THREADS": "1"}
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith(str(venv)), proc.stdout  # the model inside the installed wheel, not the checkout's
    serve = subprocess.run(
        [str(venv / "bin" / "attnserve-serve")], capture_output=True, text=True, timeout=120, cwd=elsewhere, env=env
    )
    lines = serve.stderr.splitlines()
    assert serve.returncode == 2 and len(lines) == 1 and "needs the 'serve' extra" in lines[0], serve.stderr
