"""Per-request pronunciations (`parameters.pronunciations`): `{"word or words": "phones", ...}` for one request only.

An entry overrides the dictionary (the bundle's lexicon and the operator's file) and the model for
that word, in that request; nothing is kept between requests. Its answer is a lexicon answer
(`source` `lexicon`, logprob null), so it streams and shows in `details` like one.

A value is ARPAbet, IPA or espeak-ng's IPA (service/text/phone_input.py): its alphabet is detected, or
said for every entry by `parameters.pronunciations_alphabet`. IPA is read into the model's ARPAbet phones,
so the answer is written in whatever `alphabet` the request asks for; a value written in IPA (or espeak-ng's IPA)
for an answer in espeak-ng's IPA, with stress on, is answered as it was written, stress and length marks included
(`given`: espeak's form would otherwise write its phones anew).

Matching a key to the words of the text:
- case-insensitively ("Nguyen" matches "nguyen" and "NGUYEN"), except that
- an all-caps key ("US") matches only all-caps occurrences: "US" in "the US army", not "us";
- a key of several words ("New York") matches those words one after another in the text (each by the two
  rules above, nothing but spaces between them in the key); they become one word of the answer, its span
  covering them all, its answer the key's pronunciation. The longest key that matches wins.

A key is compared with the text where the word came from (`inputs[start:end]`), so "US" matches even
when the reader spells an acronym letter by letter (the words that share that span become one, with
the key's pronunciation), and then with the word as read ("two" for "2").

Each entry is checked before anything is queued: its value must read as phones of the model's target
vocabulary (ARPAbet with stress digits for the default model). A bad entry is an InvalidRequest quoting the
entry as it was given and naming its first unknown symbol.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from attnserve.service.errors import InvalidRequest
from attnserve.service.text import ipa
from attnserve.service.text.phone_input import ALPHABETS, PhoneInputError, read_phones

FIELD = "pronunciations"  # what an error names: the option (each front end says it in its own words)
ALPHABET_FIELD = "pronunciations_alphabet"
_RESPELLING = re.compile(r"[a-z ]+")  # ASCII letters and spaces alone, as a respelling is written
MAX_ENTRIES = 1000  # per request: far more than a text has words to fix, few enough to check at once
MAX_KEY_WORDS = 8  # words in one key: a name or a phrase, not a sentence

Phrase = tuple[tuple[str, ...], tuple[int, ...]]  # a key of several words (as given), its target token ids


@dataclass(frozen=True)
class Pronunciations:
    """Checked entries: one-word keys (all-caps ones as given, the others lower-cased), keys of several words by
    their first word lower-cased (longest first); each key's target token ids."""

    caps: Mapping[str, tuple[int, ...]]
    folded: Mapping[str, tuple[int, ...]]
    phrases: Mapping[str, Sequence[Phrase]]
    # target ids -> (the value as written, the alphabet it was read as); ids two values share are left out
    given: Mapping[tuple[int, ...], tuple[str, str]] = field(default_factory=dict)

    def find(self, original: str, read: str | None = None) -> tuple[int, ...] | None:
        """The ids for a word whose text in the input is `original` (and which reads as `read`); None: no entry."""
        if original.isupper() and original in self.caps:
            return self.caps[original]
        ids = self.folded.get(original.lower())
        if ids is None and read is not None:
            ids = self.folded.get(read.lower())
        return ids

    def find_phrase(self, words: Sequence[tuple[str, str]]) -> tuple[int, tuple[int, ...]] | None:
        """The longest key of several words that the words from `words[0]` on match (each word: its text in the
        input, and as read): (how many words, its ids); None when none does."""
        if not self.phrases or not words:
            return None
        first = words[0]
        for key in {first[0].lower(), first[1].lower()}:
            for phrase, ids in self.phrases.get(key, ()):
                if len(phrase) <= len(words) and all(_matches(k, w) for k, w in zip(phrase, words)):
                    return len(phrase), ids
        return None


def _matches(key: str, word: tuple[str, str]) -> bool:
    """Whether one word of a key matches a word of the text (its text in the input, and as read)."""
    original, read = word
    if key.isupper():
        return original == key
    key = key.lower()
    return original.lower() == key or read.lower() == key


def check_pronunciations(entries: Mapping[str, str], tgt_tokenizer: Tokenizer, alphabet: str | None = None) -> Pronunciations:
    """The entries as token ids, every one checked; `alphabet` (`pronunciations_alphabet`): how every value is
    written, None to detect each one's. InvalidRequest quoting the first bad entry as given."""
    if len(entries) > MAX_ENTRIES:
        raise InvalidRequest(f"at most {MAX_ENTRIES} entries per request, got {len(entries)}", field=FIELD)
    if alphabet is not None and alphabet not in ALPHABETS:
        raise InvalidRequest(f"must be one of {', '.join(ALPHABETS)}, got {alphabet!r}", field=ALPHABET_FIELD)
    caps: dict[str, tuple[int, ...]] = {}
    folded: dict[str, tuple[int, ...]] = {}
    phrases: dict[str, list[Phrase]] = {}
    given: dict[tuple[int, ...], tuple[str, str] | None] = {}
    for key, value in entries.items():
        words = tuple(key.split())
        if not words:
            raise InvalidRequest(f"{key!r}: a key is a word, or words separated by spaces", field=FIELD)
        if len(words) > MAX_KEY_WORDS:
            raise InvalidRequest(f"{key!r}: at most {MAX_KEY_WORDS} words in one key", field=FIELD)
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"{key!r}: give its phones as a string, e.g. 'AH0 T EH1 N SH AH0 N' or 'əˈtɛnʃən'", field=FIELD)
        ids, read_as = entry_ids(key, value, tgt_tokenizer, alphabet)
        written = (value.strip(), read_as)
        given[ids] = written if given.get(ids, written) == written else None
        if len(words) > 1:
            phrases.setdefault(words[0].lower(), []).append((words, ids))
        elif words[0].isupper():
            caps[words[0]] = ids
        else:
            folded[words[0].lower()] = ids
    for found in phrases.values():
        found.sort(key=lambda p: -len(p[0]))
    return Pronunciations(caps, folded, phrases, {ids: g for ids, g in given.items() if g is not None})


def entry_ids(key: str, value: str, tgt_tokenizer: Tokenizer, alphabet: str | None) -> tuple[tuple[int, ...], str]:
    """One entry's target token ids and the alphabet its value was read as; InvalidRequest quoting the entry as given
    and naming its first unknown symbol."""
    if alphabet is None and _RESPELLING.fullmatch(value):
        # plain small letters ("engine x") parse as IPA by accident: a respelling, or IPA that says nothing of stress
        why = "plain small letters may be a respelling or IPA without stress, and are not guessed"
        raise InvalidRequest(_bad(key, value, "none", why), field=FIELD)
    try:
        phones, read_as = read_phones(value, alphabet)
    except PhoneInputError as e:
        raise InvalidRequest(_bad(key, value, e.alphabet, f"{e}{_hint(e.symbol)}"), field=FIELD) from None
    unk = tgt_tokenizer.token_to_id("<unk>")
    enc = tgt_tokenizer.encode(" ".join(phones), add_special_tokens=False)
    bad = [p for p, i in zip(phones, enc.ids) if i == unk or i is None]
    if bad or len(enc.ids) != len(phones):
        first = (bad or phones)[0]
        hint = " (a vowel carries its stress digit: AH0, AH1 or AH2)" if first in ipa.VOWELS else ""
        if read_as == "arpabet":
            where = f"{value.split()[phones.index(first)]!r} is not one of this model's phones{hint}"
        else:
            where = f"it reads as {' '.join(phones)!r}, and {first!r} is not one of this model's phones"
        raise InvalidRequest(_bad(key, value, read_as, where), field=FIELD)
    return tuple(enc.ids), read_as


def _bad(key: str, value: str, alphabet: str, why: str) -> str:
    """The message of a bad entry: the entry as given, the alphabet it was read as, what is wrong."""
    named = {"arpabet": "ARPAbet", "ipa": "IPA", "espeak": "espeak-ng IPA", "none": "no alphabet"}[alphabet]
    return (
        f"{key!r}: {value!r} read as {named}: {why}; write it in ARPAbet ('AH0 T EH1 N SH AH0 N') or IPA "
        "('əˈtɛnʃən', espeak-ng's 'ɐtˈɛnʃən'), or say which in parameters.pronunciations_alphabet"
    )


def _hint(symbol: str) -> str:
    """What to write instead of an IPA symbol the table lacks, where one is common."""
    return (
        " (a tie bar, length mark or stress mark is read; a diacritic other than n̩'s is not)"
        if len(symbol) == 1 and (0x300 <= ord(symbol) < 0x370)
        else ""
    )
