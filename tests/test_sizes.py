"""The size rule of service/, export/, training/, loadtest/ and benchmarks/: no module over 600 lines, no function over 80.

A module that size can be read whole, and a function that size on one screen. A file or function that grows
past them is split by job (as service/text/reader.py was into tokens.py, spoken.py and words.py), not granted
an exception here.

Lines are counted as `wc -l` counts them (docstrings, comments and blank lines included); a function's lines run
from its `def` to its last line, decorators aside, nested functions included. pylint's `too-many-lines` counts a
module the same way, but pylint has no check of a function's length in lines (`too-many-statements` counts
statements), so both rules are checked here, with the standard library alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("service", "export", "training", "loadtest", "benchmarks")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def long_modules(max_lines: int = MAX_MODULE_LINES) -> list[str]:
    """'path: N lines' for each module over `max_lines`."""
    out = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > max_lines:
            out.append(f"{path.relative_to(ROOT)}: {lines} lines")
    return out


def long_functions(max_lines: int = MAX_FUNCTION_LINES) -> list[str]:
    """'path:line name: N lines' for each function or method over `max_lines`."""
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > max_lines:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    return sorted(out)


def test_no_module_is_over_600_lines():
    offenders = long_modules()
    if offenders:
        listed = "\n  ".join(offenders)
        pytest.fail(f"modules over {MAX_MODULE_LINES} lines (split them by job):\n  {listed}", pytrace=False)


def test_no_function_is_over_80_lines():
    offenders = long_functions()
    if offenders:
        listed = "\n  ".join(offenders)
        pytest.fail(f"functions over {MAX_FUNCTION_LINES} lines (split them into steps):\n  {listed}", pytrace=False)


def test_the_check_finds_a_long_module_and_a_long_function(tmp_path, monkeypatch):
    """The scan itself: a module and a function one line over the limits are named, with their sizes."""
    package = tmp_path / "service"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    (package / "long.py").write_text(f"def long():\n{body}\n    return x0\n" + "\n" * MAX_MODULE_LINES)
    (package / "short.py").write_text(f"def short():\n{body}\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert long_modules() == [f"service/long.py: {MAX_MODULE_LINES + MAX_FUNCTION_LINES + 1} lines"]
    assert long_functions() == [f"service/long.py:1 long: {MAX_FUNCTION_LINES + 1} lines"]
