"""The system tests: Docker, nginx, Prometheus and the browser (make test-all; root and Debian packages).

The topology test reuses the keep-alive test's HTTP client helpers (tests/http/test_keepalive.py), so that
folder is importable from here as the tests' own folders are from theirs."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "http"))
