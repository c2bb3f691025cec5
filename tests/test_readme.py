"""The README as a new user reads it: the two commands and a first curl on the first screen, a table of contents,
what each make target installs, and links to docs/, whose index lists every page; the pages hold what the README
leaves out, complete (every setting, every metric, every command runs as shown, the counts true)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
FIRST_SCREEN = 30  # lines


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every Markdown heading outside code blocks."""
    found, in_code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^(#{1,6}) (.+)$", line)):
            found.append((len(m.group(1)), m.group(2)))
    return found


def slug(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_first_screen_has_the_two_commands_and_a_first_curl():
    first = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "make demo" in first and "make test" in first
    assert re.search(r"curl -s \S+/generate .*-d '\{\"inputs\"", first), first


def test_the_contents_link_every_section():
    contents = section(README, "Contents")
    anchors = {slug(title) for _, title in headings(README)}
    linked = re.findall(r"\]\(#([^)]+)\)", contents)
    for level, title in headings(README):
        if level == 2 and title != "Contents":
            assert f"(#{slug(title)})" in contents, f"## {title} is not in the README's contents"
    assert set(linked) <= anchors, set(linked) - anchors


def test_the_docs_index_lists_every_page_and_the_readme_links_it():
    index = (ROOT / "docs" / "README.md").read_text()
    assert "(docs/README.md)" in README
    for page in DOCS:
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/{page.name} is not in docs/README.md"


def test_every_relative_link_in_the_readme_and_docs_resolves():
    for doc in [ROOT / "README.md", *DOCS]:
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            assert file.exists(), f"{doc.name}: link to {target} (no such file)"
            if anchor and file.suffix == ".md":
                assert anchor in {slug(t) for _, t in headings(file.read_text())}, f"{doc.name}: link to {target}"


def test_every_setting_is_in_the_settings_page():
    from attnserve.service.settings import Settings

    page = (ROOT / "docs" / "SETTINGS.md").read_text()
    assert "docs/SETTINGS.md" in README
    for name in Settings.model_fields:
        assert f"`ATTNSERVE_{name.upper()}`" in page, f"ATTNSERVE_{name.upper()} is not in docs/SETTINGS.md"


def test_every_metric_is_in_the_metrics_page():
    page = (ROOT / "docs" / "METRICS.md").read_text()
    assert "docs/METRICS.md" in README
    source = (ROOT / "service" / "metrics.py").read_text()
    names = set(re.findall(r"[\"'](attnserve_[a-z_]+)[\"']", source))
    assert len(names) >= 10
    for name in names:
        assert f"`{name}" in page, f"{name} is not in docs/METRICS.md"


def test_the_readme_says_what_each_target_installs():
    setup = section(README, "Set-up: what each target installs")
    makefile = (ROOT / "Makefile").read_text()
    for stamp, target in (("installed-serve", "make demo"), ("installed", "make setup")):
        extras = re.search(rf"^\$\(BIN\)/\.{stamp}:.*?pip install -q[^\n]*-e '(\.\[[a-z,]+\])'", makefile, re.S | re.M)
        assert extras, stamp
        row = next(line for line in setup.splitlines() if line.startswith(f"| `{target}`"))
        assert f"`{extras.group(1)}`" in row, (target, extras.group(1), row)
        assert re.search(r"\| \d[\d.,]* (MB|GB) \|", row), f"{target}: no measured size"
    assert "no torch" in setup


def test_the_cpu_build_of_torch_is_documented_and_kept_out_of_ci():
    install = (ROOT / "docs" / "INSTALL.md").read_text()
    assert "docs/INSTALL.md" in section(README, "Set-up: what each target installs")
    assert "--index-url https://download.pytorch.org/whl/cpu" in section(install, "PyTorch on a machine without an NVIDIA GPU")
    for ci in [ROOT / "Makefile", ROOT / "Dockerfile", *(ROOT / ".ci").rglob("*")]:
        if ci.is_file():
            assert "download.pytorch.org" not in ci.read_text(errors="replace"), ci


def test_every_command_is_in_the_readme():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in scripts:
        assert name in README, f"{name} is not in the README"


def entry_point(name: str):
    import importlib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][name]
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def test_the_commands_make_demo_makes_ready_need_only_what_it_installs():
    setup = section(README, "Set-up: what each target installs")
    row = next(line for line in setup.splitlines() if line.startswith("| `make demo`"))
    installed = set(re.search(r"`\.\[([a-z,]+)\]`", row).group(1).split(","))
    commands = re.findall(r"`(attnserve-[a-z]+)`", row.split("|")[4])
    assert commands
    for name in commands:  # `cpu` is the core's own ONNX Runtime, which every install has
        assert set(entry_point(name).extras) <= installed | {"cpu"}, name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for extra in installed for d in project["optional-dependencies"][extra]]
    assert not [d for d in deps if d.startswith("torch")], "make demo must stay torch-free"


def commands_shown(text: str) -> set[tuple[str, str | None]]:
    """(command, subcommand or None) of every `attnserve-*` line in the text's code blocks."""
    shown = set()
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.splitlines():
            subcommands = "build|verify|requantize|add-lexicon|add-variant|add-context"
            m = re.match(rf"\s*(attnserve-[a-z]+(?:-[a-z]+)*)(?: ({subcommands})\b)?", line)
            if m:
                shown.add(m.groups())
    return shown


def test_every_command_in_the_readme_and_docs_runs_after_make_setup():
    """Each `attnserve-*` command (and subcommand) the README and docs/ show answers --help in the environment make
    setup builds; the README's own blocks show at least 8."""
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent
    assert len(commands_shown(README)) >= 8, commands_shown(README)
    shown = set().union(*(commands_shown(doc.read_text()) for doc in [ROOT / "README.md", *DOCS]))
    for command, sub in sorted(shown, key=str):
        args = [str(bin_dir / command), *([sub] if sub else []), "--help"]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "usage:" in out.stdout, (args, out.stderr[-500:])


def test_the_text_page_counts_the_written_forms_as_the_file_holds():
    """docs/TEXT.md says how many cases tests/text/written_forms.tsv holds, and of how many kinds: the file's own count."""
    rows = [
        line.split("\t")
        for line in (ROOT / "tests" / "text" / "written_forms.tsv").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    said = re.search(r"holds ([\d,]+) written forms of (\d+) kinds", (ROOT / "docs" / "TEXT.md").read_text())
    assert said, "docs/TEXT.md no longer says how many written forms tests/text/written_forms.tsv holds"
    assert (int(said.group(1).replace(",", "")), int(said.group(2))) == (len(rows), len({row[0] for row in rows}))
