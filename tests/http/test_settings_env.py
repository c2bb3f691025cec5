"""An `ATTNSERVE_*` environment variable that is not a setting stops start-up with one line naming the closest
setting (pydantic-settings alone would ignore it, leaving a typo's setting at its default without a word);
`--allow-unknown-env` starts anyway with a warning. The names the project itself sets (compose, the image,
Kubernetes, CI, the tests) are all settings or declared as not settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where the project sets or reads ATTNSERVE_* variables: each of these names must pass the start-up check.
SCANNED = ["Dockerfile", "Makefile", "docker-compose.yml", "docker-compose.gpu.yml", ".env.example"]
SCANNED_DIRS = ["deploy", "loadtest", "export/gpu_check", "tests", ".github", "docs"]


def run_serve(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("ATTNSERVE_")}
    return subprocess.run(
        [sys.executable, "-m", "attnserve.service", *args], capture_output=True, text=True, cwd=ROOT, env=clean | env, timeout=120
    )


def test_a_misspelt_setting_stops_start_up_naming_the_setting_it_resembles():
    proc = run_serve(env={"ATTNSERVE_MAX_BATH_SIZE": "8"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "ATTNSERVE_MAX_BATH_SIZE" in lines[0], lines
    assert "did you mean ATTNSERVE_MAX_BATCH_SIZE?" in lines[0] and "--allow-unknown-env" in lines[0]


def test_allow_unknown_env_starts_anyway_with_a_warning():
    # A bad setting after the check shows start-up went past it, without opening a port.
    proc = run_serve("--allow-unknown-env", "--max-batch-size", "0", env={"ATTNSERVE_MAX_BATH_SIZE": "8"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr
    assert lines[0].startswith("warning: ") and "ATTNSERVE_MAX_BATCH_SIZE" in lines[0]
    assert lines[1].startswith("error: invalid setting: max_batch_size"), lines


def test_only_variables_that_are_not_settings_are_named():
    from attnserve.service.settings import Settings, unknown_environment

    every_setting = {f"ATTNSERVE_{name.upper()}": "1" for name in Settings.model_fields}
    assert unknown_environment(every_setting | {"PATH": "/bin", "ATTNSERVE_TEST_KEEPALIVE_SCALE": "3"}) is None
    assert unknown_environment({"attnserve_max_batch_size": "8"}) is None  # the names are case-insensitive
    line = unknown_environment({"ATTNSERVE_PORTT": "1", "ATTNSERVE_QQQQQQQ": "1", "ATTNSERVE_PORT": "1"})
    assert "ATTNSERVE_PORTT (did you mean ATTNSERVE_PORT?)" in line and "ATTNSERVE_QQQQQQQ;" in line
    assert "ATTNSERVE_PORT " not in line.replace("ATTNSERVE_PORT?", "")


def test_every_attnserve_variable_the_project_sets_passes_the_check():
    from attnserve.service.settings import unknown_environment

    files = [ROOT / name for name in SCANNED if (ROOT / name).is_file()]
    files += [p for d in SCANNED_DIRS for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix not in (".png", ".pyc")]
    names = set()
    for path in files:
        if path.resolve() == Path(__file__).resolve():  # this file spells typos on purpose
            continue
        names |= set(re.findall(r"\bATTNSERVE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    names.discard("ATTNSERVE_MAX_BATH_SIZE")  # the typo docs/SETTINGS.md shows as the example of this check
    assert {"ATTNSERVE_BUNDLE", "ATTNSERVE_REPLICAS", "ATTNSERVE_TEST_KEEPALIVE_SCALE"} <= names
    assert unknown_environment(dict.fromkeys(names, "1")) is None
