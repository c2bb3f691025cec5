"""A word the lexicon lacks, read from the dictionary words it is made of (no torch).

A word names its parts in one of two ways (`compound_parts`):

- the table `tables/compound_parts.tsv`: a word whose parts are not spelt as they are said ("PyTorch": pie torch);
- its case: a word written with capitals inside splits where the case changes ("TensorFlow": tensor flow,
  "OpenStreetMap": open street map), when every part is a dictionary word of at least MIN_CASE_PART letters and the
  first is not a name's prefix ("McAllister", "DeVito": `NAME_PREFIXES`, names the model reads better).

The word is then read from its parts' first dictionary entries (`compound_reading`): the first part's stress kept,
each later part's primary stress made secondary, as CMUdict writes compounds (firewood F AY1 ER0 W UH2 D). A fixed
reading costs no model call and is the same in every batch, as a lexicon answer is.

A lower-case word is not split by the dictionary alone ("smartwatch" as smart + watch): the writer marked no split,
and on the default bundle such splits lose. Over CMUdict's test split (5,836 words, all taken out of the lexicon),
667 words split into two dictionary words of at least 4 letters in exactly one way; read from their parts (stress
ignored) 53.7% are right, against 79.8% for the model's own reading (37 gained, 211 lost: most are names and
suffixed words, "berkelman" berk + elman, "batteries" batte + ries). With parts of at least 5 letters: 63.9% against
79.8% (119 words); with only the splits whose both parts the model's reading already begins and ends with: 86.3%
against 90.4%. Taking the parts' reading where the model scores it (mean log-probability) at least as high as its
own picks it for 1 word in 667 (79.8% either way); allowing it 0.05 to 0.5 nats less, 19 to 157 words, and it loses
as many words or more than it gains. The model reads the closed compounds it meets well ("smartwatch"
S M AA1 R T W AA2 CH); tests/text/test_compounds.py keeps the measure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Sequence

from attnserve.service.text import rules

MIN_CASE_PART = 2  # shortest part of a word split by its case: the writer marked the split ("PyTorch")
# a capitalised first part that begins a name, not a word of its own ("McAllister", "DeVito", "LaGuardia")
NAME_PREFIXES = frozenset({"mc", "mac", "de", "di", "da", "du", "la", "le", "van", "von", "st", "o"})
_CASE_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")

COMPOUND_PARTS = {r[0].lower(): tuple(r[1].split()) for r in rules.table("compound_parts.tsv")}


def case_parts(written: str) -> list[str] | None:
    """The parts of a word written with capitals inside, split where the case changes, lower-cased ("TensorFlow":
    tensor flow, "HTTPServer": http server); None for a word that is not (lower case, Capitalised, ALL CAPITALS, or
    holding anything but letters)."""
    if not written.isascii() or not written.isalpha() or written.islower() or written.isupper():
        return None
    if written[1:].islower():  # "Smartwatch": capitalised, not split
        return None
    parts = _CASE_PARTS.findall(written)
    return [p.lower() for p in parts] if len(parts) > 1 else None


def compound_parts(written: str, word: str, known: Container[str]) -> tuple[str, ...] | None:
    """The parts to read `word` (lower-case) from, as the module's docstring says; `written` is the word as the text
    wrote it (its case). None: the word is not read from parts."""
    if word in COMPOUND_PARTS:
        return COMPOUND_PARTS[word]
    if written.lower() == word:
        parts = case_parts(written)
        if parts is not None:
            ok = parts[0] not in NAME_PREFIXES and all(len(p) >= MIN_CASE_PART and p in known for p in parts)
            return tuple(parts) if ok else None
    return None


def compound_reading(parts: Sequence[str], lookup: Callable[[str], str | None]) -> str | None:
    """One reading of the parts' readings (`lookup`: a part's first dictionary reading in ARPAbet, None when it has
    none): the first part's stress kept, each later part's primary stress made secondary. None when a part has no
    reading."""
    readings = [lookup(p) for p in parts]
    if any(r is None for r in readings):
        return None
    return " ".join([readings[0], *(r.replace("1", "2") for r in readings[1:])])
