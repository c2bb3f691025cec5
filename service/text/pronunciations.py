"""Per-request pronunciations (`parameters.pronunciations`): `{"word": "ARPAbet", ...}` for one request only.

An entry overrides the dictionary (the bundle's lexicon and the operator's file) and the model for
that word, in that request; nothing is kept between requests. Its answer is a lexicon answer
(`source` `lexicon`, logprob null), so it streams and shows in `details` like one.

Matching a key to the words of the text:
- case-insensitively ("Nguyen" matches "nguyen" and "NGUYEN"), except that
- an all-caps key ("US") matches only all-caps occurrences: "US" in "the US army", not "us".

A key is compared with the text where the word came from (`inputs[start:end]`), so "US" matches even
when the reader spells an acronym letter by letter (the words that share that span become one, with
the key's pronunciation), and then with the word as read ("two" for "2").

Each entry is checked before anything is queued: a key is one word, and a value is phones of the
model's target vocabulary (ARPAbet with stress digits for the default model, upper or lower case).
A bad entry is an InvalidRequest naming the word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tokenizers import Tokenizer

from service.errors import InvalidRequest
from service.text import ipa

FIELD = "parameters.pronunciations"  # what an error names
MAX_ENTRIES = 1000  # per request: far more than a text has words to fix, few enough to check at once


@dataclass(frozen=True)
class Pronunciations:
    """Checked entries: all-caps keys as given, the others lower-cased; each key's target token ids."""

    caps: Mapping[str, tuple[int, ...]]
    folded: Mapping[str, tuple[int, ...]]

    def find(self, original: str, read: str | None = None) -> tuple[int, ...] | None:
        """The ids for a word whose text in the input is `original` (and which reads as `read`); None: no entry."""
        if original.isupper() and original in self.caps:
            return self.caps[original]
        ids = self.folded.get(original.lower())
        if ids is None and read is not None:
            ids = self.folded.get(read.lower())
        return ids


def check_pronunciations(entries: Mapping[str, str], tgt_tokenizer: Tokenizer) -> Pronunciations:
    """The entries as token ids, every one checked; InvalidRequest naming the first bad word."""
    if len(entries) > MAX_ENTRIES:
        raise InvalidRequest(f"at most {MAX_ENTRIES} entries per request, got {len(entries)}", field=FIELD)
    unk = tgt_tokenizer.token_to_id("<unk>")
    caps: dict[str, tuple[int, ...]] = {}
    folded: dict[str, tuple[int, ...]] = {}
    for key, value in entries.items():
        word = key.strip()
        if not word or any(c.isspace() for c in word):
            raise InvalidRequest(f"{key!r} is not one word; give each word its own entry", field=FIELD)
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"{key!r}: give its phones as a string, e.g. 'AH0 T EH1 N SH AH0 N'", field=FIELD)
        phones = value.upper().split()
        enc = tgt_tokenizer.encode(" ".join(phones), add_special_tokens=False)
        bad = [p for p, i in zip(phones, enc.ids) if i == unk or i is None]
        if bad or len(enc.ids) != len(phones):
            hint = ""
            if any(p in ipa.VOWELS for p in bad):
                hint = " (a vowel carries its stress digit: AH0, AH1 or AH2)"
            raise InvalidRequest(
                f"{key!r}: {', '.join(repr(p) for p in bad or phones)} not in this model's phones{hint}",
                field=FIELD,
            )
        if word.isupper():
            caps[word] = tuple(enc.ids)
        else:
            folded[word.lower()] = tuple(enc.ids)
    return Pronunciations(caps, folded)
