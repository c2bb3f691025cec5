"""Pronunciations as people write them, read into ARPAbet phones: ARPAbet, IPA, or IPA as espeak-ng writes it.

A request's own pronunciations (service/text/pronunciations.py) may come in any of three alphabets:

- `arpabet`: CMUdict's phones separated by spaces, a vowel with its stress digit (`K UW2 B ER0 N EH1 T IY0 Z`),
  upper or lower case;
- `ipa`: IPA as `alphabet: "ipa"` writes it (`ˌkubɚˈnɛti͡z`-style: the stress mark before the syllable, tie bars
  on diphthongs and affricates);
- `espeak`: IPA as espeak-ng and Piper's phonemizer write it: the stress mark before the vowel, length marks
  (`iː`, `uː`, `ɑː`, `ɜː`), no tie bars, and its reduced vowels `ᵻ` and `ɐ` (`kˌuːbɚnˈɛɾiz`).

One reader reads both IPA styles (`read_ipa`); where they write the same sound differently, the style decides:

- a stress mark (`ˈ` primary, `ˌ` secondary) gives its digit to the next vowel, wherever it stands before it
  (before the syllable's onset or before the vowel); a vowel without one gets 0;
- a length mark (`ː`, `ˑ`), a tie bar (U+0361, U+035C), a syllable break (`.`, `‿`) and spaces are read past;
- the symbols are `IPA_TO_ARPABET`'s, the longest first: `aɪ` is AY, `tʃ` is CH (`t ʃ` with a space between is
  T SH). The table holds `ipa`'s symbols, espeak-ng's en-us symbols (`ᵻ` IH, `ɐ` AH, `ɾ` and `ʔ` T, `ɜ` ER,
  `o` OW, `e` EH, `x` K), and a few of other English transcriptions (`ɒ` AA, `əʊ` OW, `r` R, `g` G);
- IPA said to be `ipa` (`pronunciations_alphabet`), or with a mark only `ipa` writes (a tie bar, `ɝ`), is read
  as `alphabet: "ipa"` writes it, every diphthong and affricate tied, so there an untied pair is two phones
  (`ˈdɹɔɪŋ` "drawing" is D R AO1 IH0 NG; read as `espeak`, or with neither style's marks, it is D R OY1 NG);
- espeak-ng's conventions where its en-us output and CMUdict differ in writing, not in sound: an `ɹ` right after
  an r-coloured vowel belongs to it (`hˈɜːɹi` "hurry" HH ER1 IY0, `bᵻwˈɪldɚɹɪŋ` "bewildering" ... D ER0 IH0 NG), a
  doubled `ɹɹ` is one R, and `oː` (before `ɹ`: `mˈoːɹ` "more") is AO. These apply to IPA said to be `espeak`, or
  with a mark only espeak-ng writes (a length mark, `ᵻ`, `ɐ`, `ɾ`, `ʔ`); elsewhere `ɚɹ` is ER0 R as written;
- a syllabic consonant (`n̩`, `l̩`, `m̩`: the mark U+0329) is AH0 and the consonant, as CMUdict writes it.

`detect` tells the alphabet of a value that does not say it: ARPAbet when every space-separated piece is an ARPAbet
phone (its digit may be missing: that is then the error), or when it is plain ASCII with a capital letter or a digit;
IPA otherwise.
"""

from __future__ import annotations

from attnserve.service.text import ipa

ALPHABETS = ("arpabet", "ipa", "espeak")
PRIMARY, SECONDARY = ipa.PRIMARY, ipa.SECONDARY
SYLLABIC = "\u0329"  # combining vertical line below: n̩
# read past: length marks, tie bars, syllable breaks and linking marks, spaces
IGNORED = frozenset("\u02d0\u02d1\u0361\u035c.\u203f \t\n")

# IPA symbol -> ARPAbet phone without its digit; vowels are those whose phone is in ipa.VOWELS
IPA_TO_ARPABET = {
    # diphthongs (a tie bar between the two is read past first)
    "aɪ": "AY",
    "aʊ": "AW",
    "eɪ": "EY",
    "oʊ": "OW",
    "əʊ": "OW",
    "ɔɪ": "OY",
    # monophthongs
    "ɑ": "AA",
    "ɒ": "AA",
    "a": "AA",
    "æ": "AE",
    "ʌ": "AH",
    "ə": "AH",
    "ɐ": "AH",
    "ɔ": "AO",
    "ɛ": "EH",
    "e": "EH",
    "ɝ": "ER",
    "ɚ": "ER",
    "ɜ": "ER",
    "ɪ": "IH",
    "ᵻ": "IH",
    "i": "IY",
    "o": "OW",
    "ʊ": "UH",
    "u": "UW",
    # consonants
    "tʃ": "CH",
    "dʒ": "JH",
    "b": "B",
    "d": "D",
    "ð": "DH",
    "f": "F",
    "ɡ": "G",
    "g": "G",
    "h": "HH",
    "k": "K",
    "x": "K",
    "l": "L",
    "ɫ": "L",
    "m": "M",
    "n": "N",
    "ŋ": "NG",
    "p": "P",
    "ɹ": "R",
    "r": "R",
    "s": "S",
    "ʃ": "SH",
    "t": "T",
    "ɾ": "T",
    "ʔ": "T",
    "θ": "TH",
    "v": "V",
    "w": "W",
    "ʍ": "W",
    "j": "Y",
    "z": "Z",
    "ʒ": "ZH",
}
_LONGEST = max(len(s) for s in IPA_TO_ARPABET)
TIES = ("\u0361", "\u035c")
LENGTH = ("\u02d0", "\u02d1")


class PhoneInputError(ValueError):
    """A value that cannot be read: `symbol` is the first piece or character not understood, at `position`."""

    def __init__(self, symbol: str, position: int, alphabet: str):
        self.symbol, self.position, self.alphabet = symbol, position, alphabet
        super().__init__(f"{symbol!r} at {position} is not {WHAT[alphabet]}")


WHAT = {
    "arpabet": "an ARPAbet phone",
    "ipa": "an IPA symbol of English this server reads (docs/PRONUNCIATIONS.md)",
    "espeak": "an IPA symbol of English this server reads (docs/PRONUNCIATIONS.md)",
}


def detect(value: str) -> str:
    """`arpabet` or `ipa` (which covers espeak-ng's IPA too) for a value that does not say its alphabet."""
    pieces = value.split()
    if pieces and all(ipa.split_phone(p.upper())[0] in ipa.VOWELS or ipa.is_arpabet(p.upper()) for p in pieces):
        return "arpabet"
    if value.isascii() and any(c.isupper() or c.isdigit() for c in value):
        return "arpabet"
    return "ipa"


def ipa_style(value: str) -> str | None:
    """`ipa` for a value with a mark only `alphabet: "ipa"` writes (a tie bar, `ɝ`), `espeak` for one with a mark only
    espeak-ng writes (a length mark, `ᵻ`, `ɐ`, `ɾ`, `ʔ`), None for one with neither."""
    if any(c in value for c in (*TIES, "ɝ")):
        return "ipa"
    if any(c in value for c in (*LENGTH, "ᵻ", "ɐ", "ɾ", "ʔ")):
        return "espeak"
    return None


def read_ipa(value: str, alphabet: str | None = None) -> list[str]:
    """One pronunciation in IPA as ARPAbet phones with stress digits; `alphabet`: `ipa`, `espeak`, or None to tell by
    its marks (`ipa_style`; with neither style's marks, an untied pair is one phone and an `ɹ` is always R). Raises
    PhoneInputError naming the first character it cannot read."""
    phones: list[str] = []
    pending = "0"
    style = alphabet or ipa_style(value)
    tied, espeak = style == "ipa", style == "espeak"
    alphabet = alphabet or "ipa"
    i = 0
    while i < len(value):
        ch = value[i]
        if ch in IGNORED:
            i += 1
            continue
        if ch in (PRIMARY, SECONDARY):
            pending = "1" if ch == PRIMARY else "2"
            i += 1
            continue
        if ch == SYLLABIC and phones and not ipa.is_vowel(phones[-1]):
            phones.insert(len(phones) - 1, "AH0")
            i += 1
            continue
        symbol, end = _symbol_at(value, i, tied)
        if symbol is None:
            raise PhoneInputError(ch, i, alphabet)
        base = IPA_TO_ARPABET[symbol]
        if base == "R" and espeak and phones and (phones[-1][:2] == "ER" or phones[-1] == "R"):
            i = end  # espeak-ng's ɚɹ, ɜːɹ and ɹɹ: one phone
            continue
        if symbol == "o" and espeak and end < len(value) and value[end] in LENGTH:
            base = "AO"  # espeak-ng's oːɹ
        if base in ipa.VOWELS:
            phones.append(base + pending)
            pending = "0"
        else:
            phones.append(base)
        i = end
    if not phones:
        raise PhoneInputError(value, 0, alphabet)
    return phones


def _symbol_at(value: str, i: int, tied: bool) -> tuple[str | None, int]:
    """The longest symbol of the table at `i` (a tie bar inside it read past; with `tied`, only a tied pair is one
    symbol) and where it ends; (None, i) if none."""
    for n in range(_LONGEST, 0, -1):
        chars, j = [], i
        while j < len(value) and len(chars) < n:
            if chars and value[j] in TIES:
                j += 1
                continue
            if chars and tied and value[j - 1] not in TIES:
                break
            chars.append(value[j])
            j += 1
        candidate = "".join(chars)
        if len(chars) == n and candidate in IPA_TO_ARPABET:
            return candidate, j
    return None, i


def read_phones(value: str, alphabet: str | None = None) -> tuple[list[str], str]:
    """A pronunciation in `alphabet` (None: `detect`) as ARPAbet phones, and the alphabet it was read as. ARPAbet
    pieces are upper-cased and not checked here (the model's vocabulary checks them); IPA raises PhoneInputError."""
    if (alphabet or detect(value)) == "arpabet":
        return value.upper().split(), "arpabet"
    return read_ipa(value, alphabet), alphabet or "ipa"
