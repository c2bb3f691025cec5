"""Characters of running text -> the characters the reader's rules read (no torch).

`prepare` maps each character of a request's text, keeping where each came from:

- plain ASCII stays as it is, case kept (the rules need it: "US" is not "us");
- typographic apostrophes, quotes, dashes and spaces become their ASCII forms (`don’t` -> `don't`);
- a Latin letter outside ASCII is transliterated: its accents dropped (é -> e, keeping case) or, where that
  leaves no ASCII letter, by anyascii (ß -> ss, Æ -> AE, ø -> o, þ -> th); combining marks are dropped;
- digits of other scripts become ASCII digits;
- every other character (letters of other scripts, symbols, emoji) is left as it is: the reader reads the
  symbols its tables name (°, ½, ©...) and skips the rest, reporting each skip (`Skipped`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from anyascii import anyascii

_NON_ASCII = re.compile(r"[^\x00-\x7f]")
APOSTROPHES = {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'", "`": "'"}
PLAIN_FORMS = {
    **{q: '"' for q in "\u201c\u201d\u201e\u201f\u00ab\u00bb\u2033"},
    **{d: "-" for d in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"},
    "\u2026": "...",
    "\u2044": "/",  # the fraction slash NFKC makes of "½": "1⁄2" is read as "1/2"
}


@dataclass(frozen=True)
class Skipped:
    """Characters of the text that were not read: `original[start:end]`, and why."""

    start: int
    end: int
    text: str
    reason: str

    @property
    def message(self) -> str:
        return f"skipped {self.text!r} at {self.start}: {self.reason}"


def prepare(text: str) -> tuple[str, Sequence[int]]:
    """(the text with every character mapped as the module's docstring says, for each of its characters the index
    in `text` it came from)."""
    if text.isascii():  # the common case, char for char
        return text.replace("`", "'"), range(len(text))
    out: list[str] = []
    origin: list[int] = []
    done = 0
    for m in _NON_ASCII.finditer(text):  # ASCII runs copied whole, the other characters mapped one by one
        i = m.start()
        out.append(text[done:i].replace("`", "'"))
        origin.extend(range(done, i))
        mapped = _map(text[i], text[i + 1 : i + 2])
        out.append(mapped)
        origin.extend([i] * len(mapped))
        done = i + 1
    out.append(text[done:].replace("`", "'"))
    origin.extend(range(done, len(text)))
    return "".join(out), origin


def _map(ch: str, following: str) -> str:
    if ch.isascii():
        return APOSTROPHES.get(ch, ch)
    if ch in APOSTROPHES:
        return APOSTROPHES[ch]
    if ch in PLAIN_FORMS:
        return PLAIN_FORMS[ch]
    category = unicodedata.category(ch)
    if category in ("Mn", "Me", "Cf"):  # combining marks, joiners, variation selectors: part of the character before
        return ""
    if category == "Zs":
        return " "
    if category == "Nd":
        return str(unicodedata.digit(ch))
    if category.startswith("L") and "LATIN" in unicodedata.name(ch, ""):
        return transliterate(ch, following)
    return ch


def transliterate(ch: str, following: str = "") -> str:
    """A Latin letter in ASCII: its accents dropped where that leaves ASCII letters (É -> E, ﬁ -> fi), else anyascii's
    romanisation (ß -> ss, ø -> o), in capitals for a capital not followed by a small letter (Æ -> AE, Ærø -> Aero)."""
    stripped = "".join(c for c in unicodedata.normalize("NFKD", ch) if unicodedata.category(c) != "Mn")
    if stripped.isascii() and stripped.isalpha():
        return stripped
    roman = anyascii(ch)
    if not (roman.isascii() and roman.replace("'", "").isalpha()):
        return ch  # no letters to read: skipped as a symbol
    if ch.isupper() and len(roman) > 1:
        return roman.upper() if not following.islower() else roman.capitalize()
    return roman
