"""What the reader-level tests of tests/text/ share: one in-process Generator over the default bundle per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnserve.service.client import Generator

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


@pytest.fixture(scope="module")
def gen():
    with Generator(DEFAULT_BUNDLE) as g:
        yield g
