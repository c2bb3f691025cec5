"""benchmarks/ under the same rules as the code, and docs/BENCHMARKS.md one page that points at real files.

The scripts import nothing from tests/ and never edit `sys.path` (each runs as `python -m benchmarks.NAME` from
the repository root, where the stages import as they are); no Python file is left under docs/; the page of today's
tables stays at most 300 lines, names every script in benchmarks/, and every file it links to (a script, a raw JSON
report, the history) exists.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_PAGE_LINES = 300


def names_in_tests(root: Path) -> set[str]:
    """The names a module of tests/ is imported by: `tests` and the stem of every .py file under it."""
    return {"tests"} | {p.stem for p in (root / "tests").rglob("*.py")}


def rule_breaks(root: Path) -> list[str]:
    """'path:line what' for each import from tests/ and each use of `sys.path` in a module of benchmarks/."""
    forbidden = names_in_tests(root)
    out = []
    for path in sorted((root / "benchmarks").rglob("*.py")):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                names = []
            for name in names:
                if name.split(".")[0] in forbidden:
                    out.append((str(where), node.lineno, f"imports {name} from tests/"))
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name):
                if node.value.id == "sys":
                    out.append((str(where), node.lineno, "uses sys.path"))
    return [f"{where}:{line} {what}" for where, line, what in sorted(out)]


def page_problems(page: Path) -> list[str]:
    """What is wrong with a page of today's tables: over MAX_PAGE_LINES lines, or a relative link to no file."""
    text = page.read_text(encoding="utf-8")
    out = []
    lines = len(text.splitlines())
    if lines > MAX_PAGE_LINES:
        out.append(f"{page.name}: {lines} lines (at most {MAX_PAGE_LINES}: move older runs to benchmarks/HISTORY.md)")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path = target.partition("#")[0]
        if path and not re.match(r"[a-z]+:", path) and not (page.parent / path).exists():
            out.append(f"{page.name}: link to {target} (no such file)")
    return out


def test_benchmarks_import_nothing_from_tests_and_never_touch_sys_path():
    assert rule_breaks(ROOT) == []


def test_no_python_file_is_left_under_docs():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.py")) == []


def test_the_benchmarks_page_is_one_page_and_its_links_resolve():
    page = ROOT / "docs" / "BENCHMARKS.md"
    assert page_problems(page) == []
    linked = re.findall(r"\]\((\.\./benchmarks/[^)\s#]+)", page.read_text(encoding="utf-8"))
    assert any(p.endswith(".json") for p in linked), "every table links its raw JSON under benchmarks/results/"


def test_a_script_runs_as_a_module_from_the_repository_root(tmp_path):
    """`python -m benchmarks.NAME` with nothing on PYTHONPATH: the package, its sibling modules and the stages
    (paired_tax -> http_overhead -> measure -> attnserve.service.engine.runtime) import from the checkout."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    code = (
        "import runpy, sys; sys.argv = ['paired_tax', '--help']; runpy.run_module('benchmarks.paired_tax', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout
    where = "import benchmarks.measure as m, attnserve.service as s; print(m.__file__); print(s.__file__)"
    done = subprocess.run([sys.executable, "-c", where], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.stdout.split() == [str(ROOT / "benchmarks" / "measure.py"), str(ROOT / "attnserve" / "service" / "__init__.py")]


def scripts_not_on_the_page(root: Path, page: Path) -> list[str]:
    """Each module of benchmarks/ (but the package's __init__) whose name docs/BENCHMARKS.md does not give, as
    `benchmarks.NAME` or `benchmarks/NAME.py`."""
    text = page.read_text(encoding="utf-8")
    return [
        p.stem
        for p in sorted((root / "benchmarks").glob("*.py"))
        if p.stem != "__init__" and f"benchmarks.{p.stem}" not in text and f"benchmarks/{p.stem}.py" not in text
    ]


def test_every_script_is_named_on_the_benchmarks_page():
    """A script answers a question of today's page or is a helper the page names; one whose question is closed
    leaves the tree (benchmarks/HISTORY.md names its last commit), one that only tests use lives in tests/."""
    assert scripts_not_on_the_page(ROOT, ROOT / "docs" / "BENCHMARKS.md") == []


def test_the_checks_find_an_import_from_tests_a_sys_path_edit_a_dead_link_an_unnamed_script_and_a_long_page(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "service_harness.py").write_text("")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "ok.py").write_text("import json\nfrom benchmarks import measure\n")
    (tmp_path / "benchmarks" / "bad.py").write_text(
        "import sys\nsys.path.insert(0, 'tests')\nfrom service_harness import serving\nimport tests.conftest\n"
    )
    assert rule_breaks(tmp_path) == [
        "benchmarks/bad.py:2 uses sys.path",
        "benchmarks/bad.py:3 imports service_harness from tests/",
        "benchmarks/bad.py:4 imports tests.conftest from tests/",
    ]
    page = tmp_path / "PAGE.md"
    page.write_text("[ok](benchmarks/ok.py) [gone](benchmarks/results/gone.json) [web](https://example.org/x)\n")
    assert page_problems(page) == ["PAGE.md: link to benchmarks/results/gone.json (no such file)"]
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    page.write_text("`python -m benchmarks.ok`\n")
    assert scripts_not_on_the_page(tmp_path, page) == ["bad"]
    page.write_text("[bad](benchmarks/bad.py), `benchmarks.ok`\n")
    assert scripts_not_on_the_page(tmp_path, page) == []
    page.write_text("line\n" * (MAX_PAGE_LINES + 1))
    assert page_problems(page) == [
        f"PAGE.md: {MAX_PAGE_LINES + 1} lines (at most {MAX_PAGE_LINES}: move older runs to benchmarks/HISTORY.md)"
    ]
