"""Written forms read as people say them: each case of written_forms.tsv (kind, written, spoken) is read through the
reader twice, the written form and its spoken form, and the two readings' phones compared (stress ignored), as the
issue's suite scores them. The lexicon of the default bundle gives each word's phones; a word it does not know is
compared by its spelling. Reader only: no server, no model."""

from __future__ import annotations

import collections
import gzip
from pathlib import Path

import pytest

from attnserve.service.text.reader import read_text

HERE = Path(__file__).resolve().parent
LEXICON = HERE.parents[1] / "models" / "g2p-en" / "lexicon.tsv.gz"
ROWS = [
    line.split("\t")
    for line in (HERE / "written_forms.tsv").read_text(encoding="utf-8").splitlines()
    if line and not line.startswith("#")
]
CASES = [tuple(row[:3]) for row in ROWS]
KNOWN_MISSES = {(row[0], row[1]): row[3] for row in ROWS if len(row) > 3}  # each with its reason


@pytest.fixture(scope="module")
def lexicon() -> dict[str, str]:
    entries: dict[str, str] = {}
    with gzip.open(LEXICON, "rt", encoding="utf-8") as f:
        for line in f:
            word, phones = line.rstrip("\n").split("\t")
            entries.setdefault(word, phones)
    return entries


def phones(text: str, lexicon: dict[str, str]) -> str:
    """The phones the reader's words of `text` stand for, stress digits dropped."""
    out = []
    for w in read_text(text, known=lexicon).words:
        said = w.pronunciation or lexicon.get(w.text) or f"<{w.text}>"
        out.append("".join(c for c in said if not c.isdigit()))
    return " ".join(" ".join(out).split())


def test_the_suite_has_every_kind():
    kinds = {k for k, _, _ in CASES}
    assert len(CASES) >= 200 and len(kinds) >= 18, (len(CASES), sorted(kinds))


def test_written_forms_read_as_their_spoken_forms(lexicon):
    """Every case reads as its spoken form but the known misses, each marked with its reason; a known miss that
    reads right is a failure too, so its mark is taken off."""
    right: dict[str, list[bool]] = collections.defaultdict(list)
    wrong, fixed = [], []
    for kind, written, spoken in CASES:
        got, want = phones(written, lexicon), phones(spoken, lexicon)
        right[kind].append(got == want)
        miss = KNOWN_MISSES.get((kind, written))
        if got != want and miss is None:
            wrong.append(f"{kind}: {written!r} -> {got} | want {want}")
        elif got == want and miss is not None:
            fixed.append(f"{kind}: {written!r} reads right now: take off its mark ({miss})")
    rates = {k: sum(v) / len(v) for k, v in right.items()}
    total = sum(sum(v) for v in right.values()) / len(CASES)
    report = "\n".join(
        [f"{k}: {r:.0%} of {len(right[k])}" for k, r in sorted(rates.items())] + [f"all: {total:.1%}", *wrong, *fixed]
    )
    print(report)
    assert not wrong and not fixed, report
    assert all(len(row) in (3, 4) and (len(row) == 3 or row[3].startswith("known miss: ")) for row in ROWS)
