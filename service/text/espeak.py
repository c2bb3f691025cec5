"""ARPAbet -> espeak-ng's en-us IPA, the phonemes Piper's voices read (no torch, no model, no espeak-ng).

`alphabet: "espeak"` writes an answer as espeak-ng writes American English, so it can go to a voice trained on
espeak-ng's phonemes (Piper's, and others) as it is. The rules were chosen by comparing with espeak-ng itself
(benchmarks/espeak_distance.py; the table and what still differs: docs/IPA.md):

- every character is a key of Piper's phoneme map: no tie bars (`aɪ`, `tʃ`), no `ɝ`;
- the stress mark, primary `ˈ` or secondary `ˌ`, goes right before the stressed vowel (`twˈɛnti`);
- long vowels carry espeak-ng's length mark: `iː`, `uː`, `ɑː`, `ɔː`, `ɜː`;
- espeak-ng's American vowels: `ɜː` for stressed ER and `ɚ` for unstressed, `oʊ`, `aɪ`, `eɪ`, unstressed IY `i`,
  unstressed IH `ᵻ` before a final consonant of an inflection (`wˈɑːntᵻd`), `ɐ` for an unstressed AH that opens a
  word (`ɐbˈaʊt`);
- a T between a vowel and an unstressed vowel is the flap `ɾ` (`wˈɔːɾɚ`), and T + unstressed AH N at a word's end
  after a stressed vowel is `ʔn̩` (`bˈʌʔn̩`);
- the function words of running text take espeak-ng's weak forms, from a table measured on espeak-ng
  (espeak_function_words.tsv beside this module): "the" before a vowel `ðɪ`, "to" before a consonant `tə`, "a"
  `ɐ`, and no primary stress on a monosyllabic function word inside a phrase (`weak_form`).

`word_texts` is memoised on the phones, so a word already seen costs one dict lookup.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnserve.service.text import ipa

PRIMARY, SECONDARY = ipa.PRIMARY, ipa.SECONDARY
LONG = "\u02d0"  # ː

# ARPAbet vowel -> (stressed, unstressed) as espeak-ng writes American English
VOWELS = {
    "AA": ("ɑː", "ɑː"),
    "AE": ("æ", "æ"),
    "AH": ("ʌ", "ə"),
    "AO": ("ɔː", "ɔː"),
    "AW": ("aʊ", "aʊ"),
    "AY": ("aɪ", "aɪ"),
    "EH": ("ɛ", "ɛ"),
    "ER": ("ɜː", "ɚ"),
    "EY": ("eɪ", "eɪ"),
    "IH": ("ɪ", "ɪ"),
    "IY": ("iː", "i"),
    "OW": ("oʊ", "oʊ"),
    "OY": ("ɔɪ", "ɔɪ"),
    "UH": ("ʊ", "ʊ"),
    "UW": ("uː", "uː"),
}
CONSONANTS = {p: s.replace(ipa.TIE, "") for p, s in ipa.CONSONANTS.items()}
FLAP = "ɾ"
SYLLABIC_N = "ʔn\u0329"  # n̩ after a glottal stop: "button"
REDUCED_I = "ᵻ"
REDUCED_A = "ɐ"
# an unstressed IH after these consonants opening a word is ᵻ before these ("remain", "delete", but "result", "detect")
REDUCED_PREFIXES = frozenset(
    {("R", c) for c in ("M", "P", "K", "S", "T", "L", "F", "V", "N", "D", "JH", "W")}
    | {("D", c) for c in ("L", "F", "P", "K", "N", "M")}
    | {("B", c) for c in ("F", "L", "T", "HH", "N", "S", "W")}
)
SIBILANT_OR_ALVEOLAR = frozenset({"T", "D", "S", "Z", "SH", "ZH", "CH", "JH"})

# the marks of punctuation Piper's phonemizer keeps (attached to the word before them); others are dropped
MARKS = {".": ".", ",": ",", ";": ";", ":": ":", "!": "!", "?": "?", "\u2014": ";", "\u2013": ";", "\u2026": "."}

FUNCTION_WORDS_TSV = Path(__file__).with_name("espeak_function_words.tsv")
POSITIONS = ("alone", "final", "consonant", "vowel")


def _stressed(digit: str) -> bool:
    return digit in ("1", "2")


@functools.lru_cache(maxsize=1 << 16)
def word_texts(phones: tuple[str, ...], stress: bool = True) -> tuple[str, ...]:
    """Each phone's text in espeak-ng's IPA (a stress mark rides on its vowel's text, a dropped phone is ''); they
    concatenate to the word. A token that is no ARPAbet phone (a model's `<unk>`) is ''."""
    split = [ipa.split_phone(p) if ipa.is_arpabet(p) else ("", "") for p in phones]
    split = _demoted(split)
    out = [_vowel(split, i, stress) if b in VOWELS else _consonant(split, i) for i, (b, _) in enumerate(split)]
    n = len(split)
    # T + unstressed AH + N closing a word after a stressed vowel: a glottal stop and a syllabic n ("button")
    if n >= 4 and [b for b, _ in split[-3:]] == ["T", "AH", "N"] and split[-2][1] == "0" and _stressed(split[-4][1]):
        out[-3:] = ["", "", SYLLABIC_N]
    return tuple(out)


def _demoted(split: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The word's stresses as espeak-ng places them: one primary a word, the last (the others become secondary:
    "FBI" ˌɛfbˌiːˈaɪ); no secondary stress right before the primary on a word's first vowel ("instead" ɪnstˈɛd) or
    right after it ("access" ˈæksɛs), those vowels keeping their stressed quality (digit "d"); and a final IY
    unstressed ("probably" pɹˈɑːbəbli)."""
    vowels = [i for i, (b, _) in enumerate(split) if b in VOWELS]
    if len(vowels) < 2:
        return split
    out = list(split)
    primaries = [v for v in vowels if split[v][1] == "1"]
    for v in primaries[:-1]:
        out[v] = (split[v][0], "2")
    digits = [out[v][1] for v in vowels]
    if primaries:
        k = vowels.index(primaries[-1])  # the primary's place among the vowels
        if k == 1 and split[vowels[0]][1] == "2":  # a secondary of its own, not a primary made one
            out[vowels[0]] = (split[vowels[0]][0], "d")
        if k + 1 < len(vowels) and digits[k + 1] == "2":
            out[vowels[k + 1]] = (split[vowels[k + 1]][0], "d")
    last = vowels[-1]
    if split[last] == ("IY", "2") and last == len(split) - 1:
        out[last] = ("IY", "0")
    return out


def _consonant(split: list[tuple[str, str]], i: int) -> str:
    base = split[i][0]
    nxt = split[i + 1][0] if i + 1 < len(split) else ""
    if base == "T" and _flapped(split, i):
        return FLAP
    if base == "N" and nxt in ("K", "G"):
        return "ŋ"  # "include" ɪŋklˈuːd
    return CONSONANTS.get(base, "")


def _vowel(split: list[tuple[str, str]], i: int, stress: bool) -> str:
    base, digit = split[i]
    n = len(split)
    prev = split[i - 1][0] if i else ""
    nxt, nxt_digit = split[i + 1] if i + 1 < n else ("", "")
    after = split[i + 2][0] if i + 2 < n else ""
    stressed = _stressed(digit)
    text = VOWELS[base][0 if stressed or digit == "d" else 1]
    if digit == "0":
        text = _reduced(split, i, text)
    elif base == "AO" and nxt == "R":
        text = "oː"  # "more" mˈoːɹ
    elif base == "AO" and nxt in ("NG", "F", "S"):
        text = "ɔ"  # "long" lˈɔŋ, "off" ˈɔf, "lost" lˈɔst
    if base == "IY" and not stressed and nxt in VOWELS:
        text = "iː" if _stressed(nxt_digit) else "i"  # "create" kɹiːˈeɪt, "various" vˈɛɹiəs
    if base == "ER" and digit == "0" and nxt == "AH" and nxt_digit == "0" and after == "N" and prev in CONSONANTS:
        text = "ɹ"  # "different" dˈɪfɹənt
    elif base == "ER" and i == 1 and prev == "D" and digit == "0":
        text = REDUCED_I + "ɹ"  # "direct" dᵻɹˈɛkt
    elif base == "ER" and nxt in VOWELS:
        text += "ɹ"  # a linking r before a vowel: "around" ɚɹˈaʊnd, "current" kˈɜːɹənt
    if stress and stressed:
        text = (PRIMARY if digit == "1" else SECONDARY) + text
    return text


def _reduced(split: list[tuple[str, str]], i: int, text: str) -> str:
    """An unstressed vowel's quality where espeak-ng reduces it (ᵻ, ɐ, ɪ, ɛ, ʌ, ʊ) or keeps it full."""
    base = split[i][0]
    n = len(split)
    prev = split[i - 1][0] if i else ""
    nxt = split[i + 1][0] if i + 1 < n else ""
    after = split[i + 2][0] if i + 2 < n else ""
    first_vowel = all(b not in VOWELS for b, _ in split[:i])
    if base in ("AH", "IH") and i == n - 2 and nxt in ("D", "Z") and prev in SIBILANT_OR_ALVEOLAR:
        return REDUCED_I  # -ed, -es: "wanted" wˈɑːntᵻd, "uses" jˈuːsᵻz
    if i == 0 and base == "IH" and (nxt, after) in (("K", "S"), ("G", "Z")):
        return "ɛ"  # ex-: "example" ɛɡzˈæmpəl
    if i == 0 and base == "AH" and nxt == "N" and after in CONSONANTS:
        return "ʌ"  # un-: "until" ʌntˈɪl
    if i == 0 and base == "AH" and n > 1:
        return REDUCED_A  # "about" ɐbˈaʊt
    if base == "IH" and first_vowel and i == 1 and (prev, nxt) in REDUCED_PREFIXES:
        return REDUCED_I  # re-, de-, be-: "remain" ɹᵻmˈeɪn, "delete" dᵻlˈiːt
    if base in ("AH", "IY") and first_vowel and i == 1 and prev == "R" and nxt in CONSONANTS and (base, nxt) != ("IY", "D"):
        return REDUCED_I  # re-: "receive" ɹᵻsˈiːv, "release" ɹᵻlˈiːs (but "redo" ɹiːdˈuː)
    if base == "AH" and i == 1 and (prev, nxt) == ("S", "L"):
        return REDUCED_I  # "select" sᵻlˈɛkt
    if base == "AH" and prev == "Y" and nxt:
        return "ʊ" if nxt == "L" else "uː"  # "regular" ɹˈɛɡjʊlɚ, "argument" ˈɑːɹɡjuːmənt; a word's end: "Kenya" kˈɛnjə
    if base == "AH" and nxt == "JH" and i == n - 2:
        return "ɪ"  # "message" mˈɛsɪdʒ
    return text


def _flapped(split: list[tuple[str, str]], i: int) -> bool:
    """Whether the T at i is a flap: after a vowel (or a vowel's R) and before an unstressed vowel."""
    if i == 0 or i + 1 >= len(split):
        return False
    prev, nxt = split[i - 1], split[i + 1]
    after_vowel = prev[0] in VOWELS or (prev[0] == "R" and i >= 2 and split[i - 2][0] in VOWELS)
    return after_vowel and nxt[0] in VOWELS and nxt[1] == "0"


def phone_symbol(phone: str) -> str:
    """One ARPAbet phone alone in espeak-ng's IPA, without a stress mark (a vowel in its stressed quality unless its
    digit is 0): a top_n_tokens alternative."""
    base, digit = ipa.split_phone(phone)
    if base in VOWELS:
        return VOWELS[base][1 if digit == "0" else 0]
    return CONSONANTS[base]


def to_espeak(phones: Sequence[str] | str, stress: bool = True) -> str:
    """An ARPAbet word (phones, or one string "AH0 T EH1 N ...") in espeak-ng's IPA: `ɐtˈɛnʃən`."""
    if isinstance(phones, str):
        phones = phones.split()
    return "".join(word_texts(tuple(phones), stress))


@dataclass(frozen=True)
class WeakForms:
    """A function word as espeak-ng says it: the only word of its text, the last of its phrase, before a
    consonant and before a vowel."""

    alone: str
    final: str
    consonant: str
    vowel: str

    def at(self, position: str) -> str:
        return getattr(self, position)


@functools.cache
def function_words() -> dict[str, WeakForms]:
    """The table of function words (espeak_function_words.tsv: word, then its form in each of POSITIONS)."""
    with FUNCTION_WORDS_TSV.open(encoding="utf-8") as f:
        rows = [r for r in csv.reader(f, delimiter="\t") if r and not r[0].startswith("#")]
    header, *body = rows
    if header != ["word", *POSITIONS]:
        raise ValueError(f"{FUNCTION_WORDS_TSV.name}: header must be word, {', '.join(POSITIONS)}")
    return {r[0]: WeakForms(*r[1:]) for r in body}


def weak_form(word: str, position: str, stress: bool = True) -> str | None:
    """A function word's espeak-ng form at `position` (one of POSITIONS), or None when `word` is not in the table."""
    forms = function_words().get(word.lower())
    if forms is None:
        return None
    return forms.at(position) if stress else unstressed(forms.at(position))


def unstressed(text: str) -> str:
    """`text` without its stress marks (its length marks stay)."""
    return text.replace(PRIMARY, "").replace(SECONDARY, "")


def mark_text(written: str) -> str:
    """A kept mark of punctuation, as written in the request, as Piper's phonemizer writes it: espeak-ng ends a clause
    with one mark, so a run of marks is its first kept one ('?!' '?', '?...' '?', '...' '.'); '.', ',', ';', ':', '!'
    or '?' as written, a dash ('—', '–') ';', an ellipsis '.'; brackets and hyphens ('-', '--') nothing."""
    for ch in written:
        text = MARKS.get(ch)
        if text:
            return text
    return ""
