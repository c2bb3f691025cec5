"""Words said otherwise than CMUdict or the model would say them: tech words, brands, non-English names and loanwords
(tables/pronounced.tsv), and words read in parts by their case or their dots (no torch).

Every reading here is answered as a lexicon entry is (source `lexicon`, only where the lexicon may answer the
request), and gives way to an operator's lexicon file (ATTNSERVE_LEXICON) and to a request's pronunciations:

- `served_first`: the table's words, matched in any case with their accents folded, served by the lexicon before
  CMUdict's own readings of them, which follow (service/text/lexicon.py `Lexicon.load`). This is also how the table
  says which of CMUdict's readings of a name comes first ("Siobhan" SH AH0 V AO1 N, CMUdict's second).
- `written_word`: a word of the table flagged `written`, read only as it is written there, in its case or with its
  accents, because its folded spelling is another word ("crème" K R EH1 M, while "creme" stays CMUdict's K R IY1 M;
  "GNU" G N UW1, while the animal "gnu" stays N UW1). The reader folds accents before any lookup
  (service/text/normalize.py), so these are matched on the text as written.
- `cased_word`: a word written in mixed case with a part in capitals, which no table names, read from its parts:
  the capitals as an acronym (acronyms.tsv, else spelt), the other parts from the dictionary ("WebGPU" web G P U,
  "OpenAI" open A I, "parseHTML"). A word whose every part is a dictionary word and none in capitals is
  service/text/compounds.py's ("TensorFlow").
- `possessive_word`: a word of the table with 's, which no dictionary lists ("nginx's", "Siobhan's"), read as the
  word and the ending its last sound takes (IH0 Z after a sibilant, S after a voiceless sound, else Z).
- `dotted_names`: a name of code written with dots, "os.path", "np.array", read with "dot" between its parts rather
  than as two sentences; a part with no vowel is spelt ("np", "plt").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Protocol, runtime_checkable

from attnserve.service.text import rules
from attnserve.service.text.compounds import NAME_PREFIXES, case_parts, compound_reading
from attnserve.service.text.normalize import prepare
from attnserve.service.text.tokens import Token

TABLE_FILE = "pronounced.tsv"
MIN_LAST_LETTER_STEM = 4  # "DirectX", "SpaceX": a final capital alone is a letter after a word this long, not "isNaN"
_VOWELS = set("aeiouy")
_ACRONYM_PLURAL = re.compile(r"[A-Z]{2,}s")  # "GPUs", "CEOs": the acronym rules' (service/text/words.py)
_SIBILANTS = {"S", "Z", "SH", "ZH", "CH", "JH"}  # 's after them is IH0 Z ("nginx's"), after a vowel Z ("Goethe's")
_VOICELESS = {"P", "T", "K", "F", "TH"}


@runtime_checkable
class Dictionary(Protocol):
    """What the rules here ask of the lexicon the reader is given (service/text/lexicon.py `Lexicon`)."""

    def __contains__(self, word: object) -> bool: ...

    def lookup(self, source: str) -> list: ...  # its readings, best first, each with a `text`

    def from_operator(self, source: str) -> bool: ...  # whether the operator's file gives `source` its readings


def fold(written: str) -> str:
    """A spelling as the lexicon looks it up: accents folded as the reader folds them, lower-cased."""
    return prepare(unicodedata.normalize("NFC", written))[0].lower()


def _load() -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(folded spelling -> readings, best first; spelling as written -> reading, for the words flagged `written`)."""
    served: dict[str, list[str]] = {}
    written: dict[str, str] = {}
    for row in rules.table(TABLE_FILE):
        word, reading = unicodedata.normalize("NFC", row[0]), row[1]
        if len(row) > 2 and row[2] == "written":
            written.setdefault(word if not word.islower() else word.lower(), reading)
        else:
            readings = served.setdefault(fold(word), [])
            if reading not in readings:
                readings.append(reading)
    return {k: tuple(v) for k, v in served.items()}, written


SERVED, WRITTEN = _load()


def served_first(entries: Mapping[str, Sequence[str]], readable: Callable[[str], bool]) -> dict[str, Sequence[str]]:
    """`entries` (the bundle's lexicon: word -> readings, best first) with the table's readings of each of its words
    first and the entries' others after them, and the table's words the entries lack added. Empty of the table when
    one of its readings is not `readable` (a bundle whose targets are not ARPAbet): the table is all or nothing."""
    out = dict(entries)  # the entries' own lists, which neither changes
    if not all(readable(r) for r in [*(r for rs in SERVED.values() for r in rs), *WRITTEN.values()]):
        return out
    for word, readings in SERVED.items():
        out[word] = [*readings, *(r for r in out.get(word, ()) if r not in readings)]
    return out


def _operator_names(known: Container[str] | None, word: str) -> bool:
    return isinstance(known, Dictionary) and known.from_operator(word)


def written_word(surface: str, word: str, known: Container[str] | None) -> list[tuple[str, str | None]] | None:
    """A word of the table flagged `written`, matched on `surface` (the text as written: "crème", "GNU"); `word` is
    what the reader made of it ("creme"). None: not one, or the operator's lexicon names its folded spelling."""
    surface = unicodedata.normalize("NFC", surface)
    reading = WRITTEN.get(surface) or (WRITTEN.get(surface.lower()) if not surface.isascii() else None)
    if reading is None or _operator_names(known, word.lower()):
        return None
    return [(word.lower(), reading)]


def cased_word(word: str, known: Container[str] | None) -> list[tuple[str, str | None]] | None:
    """A word in mixed case with a part in capitals, read from its parts as one word (the module's docstring); None
    when the dictionary knows the word, a part has no reading, or no part is in capitals."""
    lowered = case_parts(word)  # first, as it is cheap: most capitalised words are no such word ("Hello")
    if lowered is None or lowered[0] in NAME_PREFIXES or _ACRONYM_PLURAL.fullmatch(word):
        return None
    if not isinstance(known, Dictionary) or word.lower() in known:
        return None
    parts, at = [], 0
    for p in lowered:
        parts.append(word[at : at + len(p)])
        at += len(p)
    capitals = [k for k, p in enumerate(parts) if p.isupper()]
    last_letter = capitals == [len(parts) - 1] and len(parts[-1]) == 1 and len(parts[-2]) >= MIN_LAST_LETTER_STEM
    if not capitals or not (last_letter or any(len(parts[k]) >= 2 for k in capitals)):
        return None
    if any(len(p) == 1 for k, p in enumerate(parts) if k != len(parts) - 1 or not last_letter):
        return None
    readings = [_acronym(p, known) if p.isupper() else _first(known, p.lower()) for p in parts]
    joined = compound_reading(readings, lambda reading: reading)  # the parts are their readings already
    return None if joined is None else [(word.lower(), joined)]


def _first(known: Dictionary, word: str) -> str | None:
    found = known.lookup(word)
    return found[0].text if found else None


def _acronym(part: str, known: Dictionary) -> str | None:
    """Capitals inside a word: as acronyms.tsv reads them, else spelt (at most rules.MAX_SPELLED_LETTERS), else the
    dictionary's word."""
    if part in rules.WORD_ACRONYMS:
        said = [pron if pron is not None else _first(known, w) for w, pron in rules.WORD_ACRONYMS[part]]
        return None if None in said else " ".join(said)
    if len(part) <= rules.MAX_SPELLED_LETTERS:
        return " ".join(rules.LETTERS[c] for c in part.lower())
    return _first(known, part.lower())


def possessive_word(word: str, known: Container[str] | None) -> list[tuple[str, str | None]] | None:
    """A word of the table with 's that the dictionary lacks, read from the word's reading (an operator's, where
    the operator's file names it) and the ending its last sound takes; None for any other word."""
    stem = word[:-2].lower()
    if not word.lower().endswith("'s") or stem not in SERVED or not isinstance(known, Dictionary) or word in known:
        return None
    reading = _first(known, stem)
    if reading is None:
        return None
    last = reading.split()[-1]
    ending = "IH0 Z" if last in _SIBILANTS else "S" if last in _VOICELESS else "Z"
    return [(word.lower(), f"{reading} {ending}")]


def dotted_names(tokens: list[Token]) -> None:
    """Read the full stops inside names of code ("os.path", "np.array", "torch.nn.functional") as "dot": a stop no
    rule has taken, between two words of two letters or more with no space about it, the second in small letters
    ("end.It" stays two sentences). A word of the name with no vowel is spelt."""
    for i in range(1, len(tokens) - 1):
        before, stop, after = tokens[i - 1], tokens[i], tokens[i + 1]
        if stop.kind != "other" or stop.text != "." or stop.used_stop:
            continue
        if before.kind != "word" or after.kind != "word" or before.end != stop.start or stop.end != after.start:
            continue
        if len(before.text) < 2 or len(after.text) < 2 or not after.text[0].islower():
            continue
        stop.spoken, stop.used_stop = [("dot", None)], True  # a word, not a sentence's end nor a pause
        for part in (before, after):
            if part.spoken is None and part.text.islower() and not _VOWELS & set(part.text):
                part.spoken = [(part.text, " ".join(rules.LETTERS[c] for c in part.text))]
