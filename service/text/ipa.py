"""ARPAbet -> IPA and back, with stress marks placed before the stressed syllable (no torch, no model).

The default model answers in ARPAbet, CMUdict's phone set: a vowel carries its stress as a digit
(`AH0` unstressed, `AH1` primary, `AH2` secondary). `to_ipa` writes the same phones in the
International Phonetic Alphabet, one symbol (or tied pair) per phone, following the usual
CMUdict-to-IPA correspondence (the table below, documented in docs/IPA.md):

- stress decides two vowel qualities, as in most IPA transcriptions of American English:
  `AH0` is schwa `ə` and stressed `AH1`/`AH2` is `ʌ`; `ER0` is `ɚ` and `ER1`/`ER2` is `ɝ`;
- the diphthongs and affricates are written with the tie bar (U+0361): `a͡ɪ`, `t͡ʃ`. Without it
  the IPA would be ambiguous: `ɔɪ` could be OY or AO IH ("drawing"), `tʃ` CH or T SH
  ("courtship"), `dʒ` JH or D ZH. With it, `to_arpabet` reads any IPA word back to the phones
  it came from (strip U+0361 for a transcription in espeak's style);
- the stress mark, primary `ˈ` or secondary `ˌ`, goes before the stressed syllable, not the vowel.
  A word is split into syllables by the maximal onset rule: the consonants between two vowels
  go to the second syllable as far as they form one of English's legal onsets (`LEGAL_ONSETS`),
  and the rest stay with the first. "attention" AH0 T EH1 N SH AH0 N -> `əˈtɛnʃən`;
  "extra" EH1 K S T R AH0 -> `ˈɛkstɹə` (S T R is an onset, K S T R is not: `ˈɛk.stɹə`).
  Consonants before a word's first vowel belong to the first syllable whatever they are.

With `stress=False` the marks are left out (the vowel qualities above stay), and ARPAbet's
digits are dropped: `AH0 T EH1 N` -> `AH T EH N`.
"""

from __future__ import annotations

from collections.abc import Sequence

PRIMARY = "\u02c8"  # ˈ
SECONDARY = "\u02cc"  # ˌ
TIE = "\u0361"  # combining double inverted breve: t͡ʃ

# ARPAbet vowel (without its digit) -> IPA; AH and ER are refined by stress in VOWEL_BY_STRESS
VOWELS = {
    "AA": "ɑ",
    "AE": "æ",
    "AH": "ʌ",
    "AO": "ɔ",
    "AW": f"a{TIE}ʊ",
    "AY": f"a{TIE}ɪ",
    "EH": "ɛ",
    "ER": "ɝ",
    "EY": f"e{TIE}ɪ",
    "IH": "ɪ",
    "IY": "i",
    "OW": f"o{TIE}ʊ",
    "OY": f"ɔ{TIE}ɪ",
    "UH": "ʊ",
    "UW": "u",
}
VOWEL_BY_STRESS = {("AH", "0"): "ə", ("ER", "0"): "ɚ"}  # the unstressed qualities; stressed ones are VOWELS'
CONSONANTS = {
    "B": "b",
    "CH": f"t{TIE}ʃ",
    "D": "d",
    "DH": "ð",
    "F": "f",
    "G": "ɡ",  # U+0261, IPA's g, not the Latin letter
    "HH": "h",
    "JH": f"d{TIE}ʒ",
    "K": "k",
    "L": "l",
    "M": "m",
    "N": "n",
    "NG": "ŋ",
    "P": "p",
    "R": "ɹ",
    "S": "s",
    "SH": "ʃ",
    "T": "t",
    "TH": "θ",
    "V": "v",
    "W": "w",
    "Y": "j",
    "Z": "z",
    "ZH": "ʒ",
}

# English's legal syllable onsets, in ARPAbet: every single consonant but NG, and these clusters
LEGAL_ONSETS = frozenset(
    {(c,) for c in CONSONANTS if c != "NG"}
    | {
        tuple(o.split())
        for o in (
            # stop or fricative + R
            "P R",
            "B R",
            "T R",
            "D R",
            "K R",
            "G R",
            "F R",
            "TH R",
            "SH R",
            # + L
            "P L",
            "B L",
            "K L",
            "G L",
            "F L",
            "S L",
            # + W
            "T W",
            "D W",
            "K W",
            "G W",
            "TH W",
            "S W",
            # + Y (before UW, UH, ER: "pure", "cute", "music")
            "P Y",
            "B Y",
            "K Y",
            "G Y",
            "F Y",
            "V Y",
            "M Y",
            "HH Y",
            # S + stop, nasal or F
            "S P",
            "S T",
            "S K",
            "S M",
            "S N",
            "S F",
            # S + stop + liquid or glide
            "S P R",
            "S P L",
            "S T R",
            "S K R",
            "S K W",
            "S K L",
            "S P Y",
            "S K Y",
        )  # fmt: skip
    }
)

STRESS_MARKS = {"1": PRIMARY, "2": SECONDARY}

# IPA symbol -> ARPAbet phone without digit, for reading IPA back; longest symbols are tried first
_FROM_IPA = {**{v: k for k, v in VOWELS.items()}, **{v: k for k, v in CONSONANTS.items()}, "ə": "AH", "ɚ": "ER"}
_SYMBOLS = sorted(_FROM_IPA, key=len, reverse=True)
_UNSTRESSED_SYMBOLS = {"ə", "ɚ"}


class IPAError(ValueError):
    """A phone or an IPA string that the table does not cover."""


def split_phone(phone: str) -> tuple[str, str]:
    """ "AH1" -> ("AH", "1"); "T" -> ("T", "")."""
    if phone[-1:].isdigit():
        return phone[:-1], phone[-1]
    return phone, ""


def is_vowel(phone: str) -> bool:
    return split_phone(phone)[0] in VOWELS


def is_arpabet(phone: str) -> bool:
    """Whether `phone` is one of ARPAbet's phones (a vowel with or without its digit, or a consonant)."""
    base, digit = split_phone(phone)
    return (base in VOWELS and digit in ("", "0", "1", "2")) or (base in CONSONANTS and not digit)


def phone_symbol(phone: str) -> str:
    """One ARPAbet phone's IPA symbol, without any stress mark."""
    base, digit = split_phone(phone)
    if base in VOWELS:
        return VOWEL_BY_STRESS.get((base, digit), VOWELS[base])
    if base in CONSONANTS and not digit:
        return CONSONANTS[base]
    raise IPAError(f"{phone!r} is not an ARPAbet phone")


def syllable_starts(phones: Sequence[str]) -> list[int]:
    """The index where each syllable begins (one per vowel), by the maximal onset rule over LEGAL_ONSETS.
    A word without a vowel has none."""
    vowels = [i for i, p in enumerate(phones) if is_vowel(p)]
    starts = []
    for k, v in enumerate(vowels):
        if k == 0:
            starts.append(0)  # a word's first consonants open its first syllable, legal onset or not
            continue
        cluster = [split_phone(p)[0] for p in phones[vowels[k - 1] + 1 : v]]
        onset = 0
        for n in range(len(cluster), 0, -1):  # the longest legal onset at the cluster's end
            if tuple(cluster[-n:]) in LEGAL_ONSETS:
                onset = n
                break
        starts.append(v - onset)
    return starts


def ipa_symbols(phones: Sequence[str], stress: bool = True) -> list[str]:
    """Each phone's IPA text, the stress mark (when `stress`) in front of the first phone of its stressed
    syllable; the texts concatenate to the word's IPA. A token that is no ARPAbet phone (a model's `<unk>`) is ''."""
    out = [phone_symbol(p) if is_arpabet(p) else "" for p in phones]
    if stress:
        vowels = [i for i, p in enumerate(phones) if is_vowel(p)]
        for start, v in zip(syllable_starts(phones), vowels):
            mark = STRESS_MARKS.get(split_phone(phones[v])[1])
            if mark:
                out[start] = mark + out[start]
    return out


def to_ipa(phones: Sequence[str] | str, stress: bool = True) -> str:
    """An ARPAbet word (phones, or one string "AH0 T EH1 N ...") in IPA: `əˈtɛnʃən`."""
    if isinstance(phones, str):
        phones = phones.split()
    return "".join(ipa_symbols(phones, stress))


def strip_stress(phone: str) -> str:
    """An ARPAbet phone without its stress digit: "AH1" -> "AH"."""
    return split_phone(phone)[0]


def to_arpabet(ipa: str, stress: bool = True) -> list[str]:
    """One word of IPA written by `to_ipa` back to its ARPAbet phones. With `stress`, each vowel gets the
    digit of the mark before its syllable (1 for ˈ, 2 for ˌ, 0 without one); without, no digits.
    Raises IPAError on a character the table does not cover."""
    phones: list[str] = []
    pending = "0"
    i = 0
    while i < len(ipa):
        ch = ipa[i]
        if ch in (PRIMARY, SECONDARY):
            pending = "1" if ch == PRIMARY else "2"
            i += 1
            continue
        symbol = next((s for s in _SYMBOLS if ipa.startswith(s, i)), None)
        if symbol is None:
            raise IPAError(f"{ch!r} at {i} of {ipa!r} is not in the IPA table")
        base = _FROM_IPA[symbol]
        if base in VOWELS:
            digit = "0" if symbol in _UNSTRESSED_SYMBOLS else pending
            phones.append(base + digit if stress else base)
            pending = "0"
        else:
            phones.append(base)
        i += len(symbol)
    return phones
