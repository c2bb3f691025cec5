"""Running text -> the words a word-level model reads (no torch).

A bundle whose `bundle.json` says `"word_level_source": true` (G2P) reads one word at a
time. For such a bundle, a request's text is read as a TTS front end reads it. The rules
are below; the words they name are tables in service/text/rules.py, and docs/TEXT.md
lists both with examples.

- Characters (service/text/normalize.py): Latin letters transliterated (é -> e, ß -> ss, Æ -> AE),
  typographic apostrophes made plain; a character no rule reads (emoji, other scripts, stray symbols)
  is skipped and reported (`Skipped`, a warning in the answer's details) -- a text is refused only
  when nothing in it can be read.
- Words: punctuation split off (`cat.` -> `cat`, `well-known` -> well known), an apostrophe inside a
  word kept (`don't`), case folded for lookup but read first: an all-capital word is spelt letter by
  letter when the dictionary does not know it and it has at most 5 letters (GPU), or when it is also a
  common word and the sentence is not all in capitals (US, IT, WHO: `SPELLED_ACRONYMS`); a word the
  dictionary knows is read as a word (NASA); "A" and "I" are words. Roman numerals after a name or a
  word such as "War" or "Chapter" are numbers ("Henry VIII" Henry the eighth, "World War II" two).
  Abbreviations by context (`ABBREVIATIONS`: "Dr. Smith" doctor, "Elm Dr." drive), dotted ones
  (e.g., U.S.), accented words that fold into another word ("résumé": `ACCENTED_WORDS`).
- Numbers, spelt out by num2words: cardinals (`2` two, `1,000` one thousand, `3.5` three point
  five, `-4` minus four), years (1000-2999 without a comma: `1999` nineteen ninety-nine), decades
  (`1990s`, `'80s`), ordinals (`2nd`), money (`$5.50` five dollars and fifty cents, `€2.5 million`
  two point five million euros), times (`10:30 am` ten thirty A M), phone numbers digit by digit,
  versions (`v2.0` version two point zero), units after a number (`5kg` five kilograms, `18°C`),
  fractions (`1/2`, `½` one half), `#1` number one; digits inside a word are read apart (`b2b`).
- Symbols read as words where a reader says them (%, &, +, @, =, °, ©, ™, §...: `SYMBOL_WORDS`);
  e-mail addresses and URLs read with their "dot", "at" and "slash".

Each word keeps the span of the original text it came from (`2` and its `two` share it; so do `$5` and
both `five` and `dollars`), so later stages can read the sentence around it. A word whose reading the
rules fix (letters spelt, an accented word) carries it as `pronunciation`, answered as the lexicon's
answers are. The model's answers for the words are joined with WORD_SEPARATOR, which no target token
contains (`check_separator`).

Limits (MAX_TEXT_CHARS, MAX_WORDS) are defaults that `TextReader`'s arguments override (from the
service settings `max_text_chars` and `max_words`, which their errors name).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from num2words import num2words
from tokenizers import Tokenizer

from service.text import rules
from service.text.normalize import Skipped, prepare
from service.text.rules import CURRENCIES, Currency

__all__ = ["Currency", "Reading", "Skipped", "TextError", "TextReader", "Word", "check_separator", "split_words", "read_text"]

WORD_SEPARATOR = " | "  # joins the words' answers in generated_text; '|' is in no G2P target token
MAX_TEXT_CHARS = 20_000  # longest text read in one request, in characters of the original text
# most words in one request, counted after numbers are spelt out: a 20,000-character text of about 3,500 written
# words, numbers and symbols among them, reads as up to twice as many
MAX_WORDS = 10_000

_NUMBER = r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?"
_VULGAR = "".join(  # ½ ¼ ⅞ ...: the vulgar fractions
    c for c in map(chr, range(0xA0, 0x2200)) if unicodedata.category(c) == "No" and "FRACTION" in unicodedata.name(c, "")
)
_UNITS = "|".join(re.escape(u) for u in sorted(rules.UNITS, key=len, reverse=True))
_ATTACHED = "|".join(re.escape(u) for u in sorted(rules.ATTACHED_UNITS, key=len, reverse=True))
_MAGNITUDE = "|".join(rules.MAGNITUDES)
_SHORT_MAGNITUDE = "|".join(sorted(rules.SHORT_MAGNITUDES, key=len, reverse=True))
_ATTACHED_MAGNITUDE = "|".join(  # "10k", "5bn"; "5m" is five meters
    sorted((k for k in rules.SHORT_MAGNITUDES if k not in rules.ATTACHED_UNITS and len(k) > 1 or k == "k"), key=len, reverse=True)
)
_TOKENS = re.compile(
    r"(?P<url>(?:(?i:https?|ftp)://|(?i:www)\.)[^\s<>\"]*[^\s<>\".,;:!?)'\]])"
    r"|(?P<email>[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})"
    r"|(?P<time>(?<![0-9:.])(?P<hour>[01]?[0-9]|2[0-3]):(?P<minute>[0-5][0-9])(?::(?P<second>[0-5][0-9]))?(?![0-9:]))"
    # phone numbers: +country and groups, (area) and groups, groups joined by "-" or "." (spaces alone would take a
    # list of numbers, "100 500 1000"), or 555-1234
    r"|(?P<phone>(?<![\w+])\+[0-9]{1,3}(?:[\s.-]?[0-9]{2,4}){2,4}(?![0-9])"
    r"|(?<![\w+])\([0-9]{3}\)\s?[0-9]{3}[\s.-][0-9]{4}(?![0-9])"
    r"|(?<![\w.-])[0-9]{3}(?P<sep>[.-])[0-9]{3}(?P=sep)[0-9]{4}(?![0-9])"
    r"|(?<![\w.-])[0-9]{3}-[0-9]{4}(?![\w-]))"
    rf"|(?P<currency>(?P<symbol>[{''.join(map(re.escape, CURRENCIES))}])\s?(?P<amount>{_NUMBER})"
    rf"(?:\s(?P<cmag>(?i:{_MAGNITUDE}))\b|(?P<cshort>(?i:{_SHORT_MAGNITUDE}))\b)?)"
    r"|(?P<version>(?<![A-Za-z0-9])[vV](?P<vnum>[0-9]+(?:\.[0-9]+)+)(?![\w.]))"
    r"|(?P<dotnum>(?<![\w.])[0-9]+(?:\.[0-9]+){2,}(?![\w]))"
    rf"|(?P<vulgar>(?:(?P<whole>[0-9]+)\s?)?[{_VULGAR}])"
    r"|(?P<fraction>(?<![0-9/.,])(?P<num>[0-9]{1,3})/(?P<den>[0-9]{1,3})(?![0-9/]))"
    r"|(?P<range>(?<![\w.,-])(?P<low>[0-9]+)-(?P<high>[0-9]+)(?![\w-]|[.,][0-9]))"
    r"|(?P<decade>(?:1[0-9]|2[0-9])?[1-9]0|[12][0-9]00)'?s(?![A-Za-z])"
    r"|(?P<ordinal>[0-9]+)(?:st|nd|rd|th)(?![A-Za-z])"
    rf"|(?P<measure>(?P<mminus>(?<![\w.,])-)?(?<![A-Za-z])(?P<mnum>{_NUMBER})"
    rf"(?:\s?(?P<unit>{_UNITS})|(?P<aunit>{_ATTACHED})|(?P<mag>{_ATTACHED_MAGNITUDE}))(?![A-Za-z0-9]))"
    rf"|(?P<number>(?P<minus>(?<![\w.,])-)?(?P<digits>{_NUMBER}))"
    r"|(?P<hash>#)(?=[A-Za-z0-9])"
    r"|(?P<dotted>(?<![A-Za-z.])(?:[A-Za-z]\.){2,})"
    r"|(?P<word>[A-Za-z]+(?:'[A-Za-z]+)*)"
    r"|(?P<other>[^\sA-Za-z0-9'])"
)
_SPELLED_SPLIT = re.compile(r"[\s,-]+")  # num2words writes "twenty-one", "one thousand, two hundred"
_ROMAN = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_SENTENCE_ENDS = {".", "!", "?"}


class TextError(ValueError):
    """The text cannot be read; the message says why and what to change (a 422 for a route)."""


@dataclass(frozen=True)
class Word:
    """A word as the model reads it, and where it came from: `original[start:end]`."""

    text: str  # normalised, numbers spelt out: "two" for "2"
    start: int
    end: int
    source_ids: tuple[int, ...] = ()  # its source token ids, once `TextReader.words` has read it
    pronunciation: str | None = None  # a reading the rules fixed (letters spelt: "JH IY1 P IY1 Y UW1"), else None
    punctuation: bool = False  # a mark of punctuation kept as its own token (`punctuation=True`): text is the mark


@dataclass
class Reading:
    """What a text was read as: its words in order, and the characters skipped (each a warning)."""

    words: list[Word]
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class _Token:
    """A piece of the text matched by one rule: `kind` names the rule (a group of _TOKENS), `text` is the piece of
    the prepared text (case kept), `start`/`end` its offsets in the original."""

    kind: str
    text: str
    start: int
    end: int
    match: re.Match
    spoken: list[tuple[str, str | None]] | None = None  # (word, fixed pronunciation) once read; [] reads nothing
    used_stop: bool = False  # a full stop taken by the abbreviation before it
    pieces: list[tuple[int, int]] | None = None  # each spoken word's own span in `text` (URLs), else the token's


def split_words(
    text: str,
    max_chars: int = MAX_TEXT_CHARS,
    max_words: int = MAX_WORDS,
    known: Container[str] | None = None,
) -> list[Word]:
    """The words of `text`, in order (see the module's docstring for the rules); `read_text` also says what it skipped."""
    return read_text(text, max_chars, max_words, known).words


def read_text(
    text: str,
    max_chars: int = MAX_TEXT_CHARS,
    max_words: int = MAX_WORDS,
    known: Container[str] | None = None,
    punctuation: bool = False,
) -> Reading:
    """The words of `text` and the characters skipped. `known`: the dictionary's words (lower-case), which tells an
    acronym read as a word (NASA) from one spelt (GPU); None: no word is known. `punctuation`: keep the marks of
    rules.PAUSE_MARKS between the words, each run of them as one `Word` with `punctuation` set (where a TTS engine
    pauses); the full stop of an abbreviation is not one.

    Raises TextError when `text` is longer than `max_chars`, has more than `max_words` words, or has none.
    Does not check that the model can read them: `TextReader.read` does.
    """
    if not isinstance(text, str):
        raise TextError("input must be text")
    if len(text) > max_chars:
        raise TextError(
            f"input is {len(text)} characters long; at most {max_chars} are read per request (max_text_chars); "
            "send the text in parts"
        )
    if text.isascii() and text.isalpha() and text.islower() and not punctuation:
        # one plain lower-case word, the common request: what the rules below make of it
        return Reading([Word(text.lower(), 0, len(text))])
    prepared, origin = prepare(text)
    tokens: list[_Token] = []
    for m in _TOKENS.finditer(prepared):
        # each alternative of _TOKENS is one named group around the others: the last to close names the rule
        tokens.append(_Token(m.lastgroup, m.group(), origin[m.start()], origin[m.end() - 1] + 1, m))
    skipped: list[Skipped] = []
    _read_tokens(text, tokens, known, skipped)
    words: list[Word] = []
    n_words = 0
    for t in tokens:
        if punctuation and t.kind == "other" and _is_pause(text, t):
            if words and words[-1].punctuation and t.start <= words[-1].end:  # "?!", "...", "…": one mark
                last = words[-1]
                words[-1] = Word(last.text + t.text, last.start, max(last.end, t.end), punctuation=True)
            else:
                words.append(Word(t.text, t.start, t.end, punctuation=True))
            continue
        spans = [(t.start, t.end)] * len(t.spoken or ())
        if t.pieces is not None:  # offsets in the token's prepared text -> the original's
            at = t.match.start()
            spans = [(origin[at + a], origin[at + b - 1] + 1) for a, b in t.pieces]
        for (spoken, pronunciation), (start, end) in zip(t.spoken or (), spans):
            words.append(Word(spoken, start, end, (), pronunciation))
        n_words += len(t.spoken or ())
        if n_words > max_words:
            raise TextError(
                f"input has more than {max_words} words; at most {max_words} are read per request (max_words); "
                "send the text in parts"
            )
    skipped = _merged(skipped)
    if not n_words:
        shown = f" (skipped: {', '.join(repr(s.text) for s in skipped[:5])})" if skipped else ""
        raise TextError(f"input has no words to read{shown}")
    return Reading(words, skipped)


def _is_pause(text: str, t: _Token) -> bool:
    """A mark of punctuation where a reader pauses: rules.PAUSE_MARKS; a hyphen only as a dash (spaced, or written
    as one: "—"), a full stop not taken by an abbreviation."""
    if t.text not in rules.PAUSE_MARKS or t.used_stop:
        return False
    if t.text != "-":
        return True
    spaced = text[t.start - 1 : t.start].isspace() or text[t.end : t.end + 1].isspace()
    return spaced or text[t.start] != "-"


def _merged(skipped: list[Skipped]) -> list[Skipped]:
    """Neighbouring skips with the same reason as one (an emoji of several code points, a word of another script)."""
    out: list[Skipped] = []
    for s in skipped:
        if out and out[-1].reason == s.reason and out[-1].end == s.start:
            last = out[-1]
            out[-1] = Skipped(last.start, s.end, last.text + s.text, last.reason)
        else:
            out.append(s)
    return out


# ---- reading the tokens --------------------------------------------------------------------------
def _read_tokens(text: str, tokens: list[_Token], known: Container[str] | None, skipped: list[Skipped]) -> None:
    """Set each token's `spoken` words: first what needs no context, then abbreviations and numerals (which look at
    their neighbours), then acronyms (which look at the sentence)."""
    for i, t in enumerate(tokens):
        if t.kind in ("word", "dotted"):
            continue
        try:
            t.spoken = _plain(_read_token(t, tokens, i))
        except (OverflowError, ValueError, ArithmeticError):  # num2words stops at 10**600 and the like
            number = text[t.start : t.end] if t.end - t.start <= 24 else text[t.start : t.start + 20] + "..."
            raise TextError(f"number {number!r} is too large to read; write it in words") from None
        if t.kind == "other" and t.spoken is None:
            ch = t.text
            if not unicodedata.category(ch).startswith("P"):  # punctuation separates words and is not read
                skipped.append(Skipped(t.start, t.end, text[t.start : t.end], _skip_reason(ch)))
            t.spoken = []
    for i, t in enumerate(tokens):
        if t.kind in ("word", "dotted"):
            t.spoken = _context_word(text, tokens, i)
    caps = _all_caps_sentences(tokens)
    for i, t in enumerate(tokens):
        if t.kind == "word" and t.spoken is None:
            t.spoken = _case_word(text[t.start : t.end], t.text, caps[i], known)


def _plain(words: list[str] | None) -> list[tuple[str, str | None]] | None:
    return None if words is None else [(w, None) for w in words]


def _skip_reason(ch: str) -> str:
    category = unicodedata.category(ch)
    if category.startswith("L"):
        return "a letter of a script this model does not read"
    if category.startswith("S"):
        return "a symbol or emoji with no spoken form"
    return "a character with no spoken form"


def _read_token(t: _Token, tokens: list[_Token], i: int) -> list[str] | None:
    """The words a token that needs no sentence context is read as; None for a symbol no table names."""
    m = t.match
    kind = t.kind
    if kind == "other":
        ch = t.text
        return list(rules.SYMBOL_WORDS[ch]) if ch in rules.SYMBOL_WORDS else None
    if kind == "ordinal":
        return _spelled(num2words(int(m["ordinal"]), lang="en", to="ordinal"))
    if kind == "decade":
        return _decade(m["decade"])
    if kind == "currency":
        return _money(m["amount"], CURRENCIES[m["symbol"]], m["cmag"] or m["cshort"])
    if kind == "number":
        return (["minus"] if m["minus"] else []) + _number(m["digits"])
    if kind == "measure":
        return (["minus"] if m["mminus"] else []) + _measure(m)
    if kind == "time":
        return _time(m, _next(tokens, i))
    if kind == "phone":
        return [rules.DIGITS[int(c)] for c in m["phone"] if c.isdigit()]
    if kind == "version":
        return [*rules.VERSION_WORD, *_dotted_number(m["vnum"])]
    if kind == "dotnum":
        return _dotted_number(m["dotnum"])
    if kind == "range":
        return [*_number(m["low"]), *rules.RANGE_WORD, *_number(m["high"])]
    if kind == "fraction":
        return _fraction(int(m["num"]), int(m["den"]))
    if kind == "vulgar":
        value = Fraction(unicodedata.numeric(t.text[-1])).limit_denominator(100)
        whole = [*_number(m["whole"]), "and"] if m["whole"] else []
        return whole + _fraction(value.numerator, value.denominator)
    if kind == "hash":
        following = _next(tokens, i)
        return list(rules.HASH_BEFORE_NUMBER if following is not None and following.text[0].isdigit() else rules.HASH_BEFORE_WORD)
    if kind in ("url", "email"):
        words, t.pieces = _address(t.text)
        return words
    raise RuntimeError(f"no rule reads a {kind!r} token")


def _next(tokens: list[_Token], i: int) -> _Token | None:
    return tokens[i + 1] if i + 1 < len(tokens) else None


def _prev(tokens: list[_Token], i: int) -> _Token | None:
    return tokens[i - 1] if i > 0 else None


def _number(number: str) -> list[str]:
    if "," not in number and "." not in number and 1000 <= int(number) <= 2999:
        spoken = num2words(int(number), lang="en", to="year")
    else:
        value = Decimal(number.replace(",", ""))
        spoken = num2words(int(value) if value == value.to_integral_value() and "." not in number else value, lang="en")
    return _spelled(spoken)


def _cardinal(n: int) -> list[str]:
    return _spelled(num2words(n, lang="en"))


def _dotted_number(text: str) -> list[str]:
    """`2.0` two point zero, `1.2.10` one point two point ten: each part a cardinal, "point" between."""
    out: list[str] = []
    for k, part in enumerate(text.split(".")):
        out += (["point"] if k else []) + _cardinal(int(part))
    return out


def _measure(m: re.Match) -> list[str]:
    """A number and the unit or magnitude right after it: `5kg` five kilograms, `1 km` one kilometer, `10k` ten thousand."""
    number = m["mnum"]
    value = Decimal(number.replace(",", ""))
    # a cardinal, never a year: "2000 km" two thousand kilometers
    spoken = _spelled(num2words(int(value) if "." not in number else value, lang="en"))
    if m["mag"]:
        return [*spoken, rules.SHORT_MAGNITUDES[m["mag"].lower()]]
    forms = rules.UNITS[m["unit"]] if m["unit"] else rules.ATTACHED_UNITS[m["aunit"]]
    return [*spoken, *forms[number != "1"].split()]


def _fraction(num: int, den: int) -> list[str]:
    """`1/2` one half, `3/4` three quarters, `2/3` two thirds, `5/8` five eighths."""
    if den == 0:
        return [*_cardinal(num), "over", "zero"]
    if den == 1:
        return [*_cardinal(num), "over", "one"]
    many = num != 1
    if den in rules.FRACTION_NAMES:
        name = rules.FRACTION_NAMES[den][many]
    else:
        ordinal = num2words(den, lang="en", to="ordinal")
        name = ordinal + "s" if many else ordinal
    return [*_cardinal(num), *_spelled(name)]


def _time(m: re.Match, following: _Token | None) -> list[str]:
    """`10:30` ten thirty, `10:05` ten oh five, `10:00` ten o'clock (ten, before am or pm), `10:30:15` ten thirty and
    fifteen seconds."""
    hour, minute = int(m["hour"]), int(m["minute"])
    words = _cardinal(hour)
    suffix = following is not None and following.kind in ("word", "dotted") and following.text.lower() in rules.TIME_SUFFIXES
    if minute == 0:
        words += [] if suffix or m["second"] else ["o'clock"]
    elif minute < 10:
        words += ["oh", *_cardinal(minute)]
    else:
        words += _cardinal(minute)
    if m["second"]:
        second = int(m["second"])
        words += ["and", *_cardinal(second), "second" if second == 1 else "seconds"]
    return words


def _address(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """A URL or an e-mail address: its words read (a part in URL_SPELLED spelt), numbers as numbers, and its
    punctuation as in URL_SYMBOLS ("dot", "slash", "at"); and each word's span in `text`."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    for piece in re.finditer(r"[A-Za-z]+|[0-9]+|.", text):
        p = piece.group()
        if p.isalpha():
            words = list(p.lower()) if p.lower() in rules.URL_SPELLED else [p.lower()]
        elif p.isdigit():
            words = _cardinal(int(p)) if len(p) <= 4 else [rules.DIGITS[int(c)] for c in p]
        else:
            words = list(rules.URL_SYMBOLS.get(p, ()))
        out += words
        spans += [piece.span()] * len(words)
    return out, spans


def _money(amount_text: str, currency: Currency, magnitude: str | None = None) -> list[str]:
    """`$5` five dollars, `$5.50` five dollars and fifty cents, `$0.01` one cent, `$1.005` one point zero zero five
    dollars, `€2.5 million` two point five million euros: units and cents as a person says them, each counted in the
    singular or plural."""
    amount = Decimal(amount_text.replace(",", ""))
    whole = int(amount)
    decimals = amount_text.partition(".")[2]

    def counted(n: int, forms: tuple[str, str]) -> list[str]:
        return [*_spelled(num2words(n, lang="en")), forms[n != 1]]

    if magnitude is not None:
        scale = rules.MAGNITUDES.get(magnitude.lower()) or rules.SHORT_MAGNITUDES[magnitude.lower()]
        return [*_spelled(num2words(amount if decimals else whole, lang="en")), scale, currency.unit[1]]
    if decimals and (currency.cent is None or len(decimals) != 2):  # not units and cents: the number, then the unit
        return [*_spelled(num2words(amount, lang="en")), currency.unit[1]]
    cents = int(decimals or 0)
    if not cents:
        return counted(whole, currency.unit)
    if not whole:
        return counted(cents, currency.cent)
    return [*counted(whole, currency.unit), "and", *counted(cents, currency.cent)]


def _decade(digits: str) -> list[str]:
    """`1990s` nineteen nineties, `1900s` nineteen hundreds, `2000s` two thousands, `2010s` twenty tens, `80s` eighties."""
    if len(digits) == 2:
        return _spelled(_plural(num2words(int(digits), lang="en")))
    century, tens = int(digits[:2]), int(digits[2:])
    if tens:
        return [*_spelled(num2words(century, lang="en")), *_spelled(_plural(num2words(tens, lang="en")))]
    if century % 10 == 0:  # 1000s, 2000s
        return _spelled(_plural(num2words(int(digits), lang="en")))
    return [*_spelled(num2words(century, lang="en")), "hundreds"]


def _plural(spoken: str) -> str:
    return spoken[:-1] + "ies" if spoken.endswith("y") else spoken + "s"


def _spelled(text: str) -> list[str]:
    return [w for w in _SPELLED_SPLIT.split(text.casefold()) if w]


# ---- words in context ----------------------------------------------------------------------------
def _letters(word: str) -> str:
    """A word spelt out: its letters' names (rules.LETTERS)."""
    return " ".join(rules.LETTERS[c] for c in word.lower() if c in rules.LETTERS)


def _is_name(t: _Token | None) -> bool:
    """A capitalised word: "Smith", "Main", "LOUIS"."""
    return t is not None and t.kind == "word" and t.text[0].isupper()


def _adjacent(a: _Token, b: _Token | None, text: str) -> bool:
    """Whether only spaces stand between two tokens."""
    return b is not None and not text[a.end : b.start].strip()


def _context_word(text: str, tokens: list[_Token], i: int) -> list[tuple[str, str | None]] | None:
    """A word read by its neighbours: an abbreviation, a Roman numeral, am/pm after a time, an accented word, a dotted
    abbreviation; None: read by case (`_case_word`)."""
    t = tokens[i]
    word = t.text
    surface = text[t.start : t.end]
    prev = _prev(tokens, i)
    if t.kind == "dotted":
        lower = word.lower()
        if lower in rules.DOTTED:
            return _plain(list(rules.DOTTED[lower]))
        letters = lower.replace(".", "")
        return [(letters, _letters(letters))]
    accented = unicodedata.normalize("NFC", surface).lower()
    if accented in rules.ACCENTED_WORDS:
        return [(word.lower(), rules.ACCENTED_WORDS[accented])]
    lower = word.lower()
    if lower in rules.TIME_SUFFIXES and prev is not None and prev.kind in ("time", "number") and _adjacent(prev, t, text):
        return [(lower, _letters(lower))]
    abbreviation = _abbreviation(text, tokens, i)
    if abbreviation is not None:
        return _plain(abbreviation)
    if _ROMAN.fullmatch(word) and word.isupper():
        numeral = _roman(word, prev if prev is not None and _adjacent(prev, t, text) else None)
        if numeral is not None:
            return _plain(numeral)
    return None


def _abbreviation(text: str, tokens: list[_Token], i: int) -> list[str] | None:
    """An abbreviation of rules.ABBREVIATIONS read by its neighbours, its full stop taken; None: not one."""
    t = tokens[i]
    word = t.text
    key = next((k for k in (word, word.capitalize(), word.lower()) if k in rules.ABBREVIATIONS), None)
    if key is None or word not in (key, key.upper(), key.lower()):
        return None
    stop = _next(tokens, i)
    has_stop = stop is not None and stop.text == "." and stop.start == t.end
    after = tokens[i + 2] if has_stop and i + 2 < len(tokens) else (None if has_stop else stop)
    stop_counts = has_stop and after is not None  # a full stop that ends the text may end a sentence instead
    written_as_title = word[0].isupper()
    if key in rules.ABBREVIATIONS_NEED_STOP or not written_as_title:
        if not stop_counts:
            return None
    if key in rules.ABBREVIATIONS_BEFORE_NUMBER_ONLY and not (after is not None and after.kind in ("number", "measure")):
        return None
    before_name, after_name, elsewhere = rules.ABBREVIATIONS[key]
    prev = _prev(tokens, i)
    if _is_name(after) and _adjacent(stop if has_stop else t, after, text):
        reading = before_name
    elif prev is not None and (_is_name(prev) or prev.kind in ("number", "ordinal")) and _adjacent(prev, t, text):
        reading = after_name
    else:
        reading = elsewhere
    if has_stop and not (after is not None and after.kind == "word" and after.text[0].isupper() and reading == after_name):
        stop.used_stop = True  # taken by the abbreviation (it still ends a sentence when a capital follows "Main St.")
    return reading.split()


def _roman(numeral: str, prev: _Token | None) -> list[str] | None:
    """A Roman numeral's reading by the word before it (rules.ROMAN_*); None: not a numeral here."""
    if prev is None or prev.kind != "word":
        return None
    value = _roman_value(numeral)
    name = prev.text.lower()
    if name in rules.ROMAN_REGNAL_NAMES and prev.text[0].isupper():
        return ["the", *_spelled(num2words(value, lang="en", to="ordinal"))]
    if name in rules.ROMAN_CARDINAL_AFTER:
        return _cardinal(value)
    if prev.text[0].isupper() and len(numeral) >= 2 and set(numeral) <= set("IVX"):
        return _cardinal(value)
    return None


def _roman_value(numeral: str) -> int:
    total = 0
    for k, c in enumerate(numeral):
        v = _ROMAN_VALUES[c]
        total += -v if k + 1 < len(numeral) and _ROMAN_VALUES[numeral[k + 1]] > v else v
    return total


def _all_caps_sentences(tokens: list[_Token]) -> list[bool]:
    """For each token, whether the sentence it stands in has two or more words and no small letter (a headline; one
    word alone, "IT", is not a sentence in capitals)."""
    out = [False] * len(tokens)
    begin = 0
    for i in range(len(tokens) + 1):
        t = tokens[i] if i < len(tokens) else None
        end_here = t is None or (t.kind == "other" and t.text in _SENTENCE_ENDS and not t.used_stop)
        if not end_here:
            continue
        words = [t.text for t in tokens[begin:i] if t.kind in ("word", "dotted")]
        caps = len(words) >= 2 and not any(c.islower() for w in words for c in w)
        for k in range(begin, i):
            out[k] = caps
        begin = i + 1
    return out


def _case_word(surface: str, word: str, sentence_in_capitals: bool, known: Container[str] | None) -> list[tuple[str, str | None]]:
    """A word read by its case: an all-capital word is spelt when the dictionary does not know it and it is short, or
    when it is a common word written as an acronym in a sentence not all in capitals; any other word is read as a
    word (lower-cased)."""
    lower = word.lower()
    letters = word.replace("'", "")
    if len(letters) < 2 or not word[0].isupper() or not letters.isalpha():
        return [(lower, None)]
    if letters.isupper():
        if word in rules.WORD_ACRONYMS:
            return [(lower, None)]
        if word in rules.SPELLED_ACRONYMS:
            return [(lower, None if sentence_in_capitals else _letters(word))]
        if (known is None or lower not in known) and len(letters) <= rules.MAX_SPELLED_LETTERS and "'" not in word:
            return [(lower, _letters(word))]
        return [(lower, None)]
    stem = word[:-1]
    if word.endswith("s") and len(stem) >= 2 and stem.isupper() and len(stem) <= rules.MAX_SPELLED_LETTERS:
        # a plural acronym, "GPUs": spelt, then the plural's Z
        if stem not in rules.WORD_ACRONYMS and (known is None or (stem.lower() not in known and lower not in known)):
            return [(lower, _letters(stem) + " Z")]
    return [(lower, None)]


def check_separator(tgt_tokenizer: Tokenizer, separator: str = WORD_SEPARATOR) -> None:
    """Raise ValueError when a target token contains the separator's mark, so joined answers could
    not be split back into words (the G2P target vocabulary holds no '|')."""
    mark = separator.strip()
    clash = sorted(tok for tok in tgt_tokenizer.get_vocab() if mark and mark in tok)
    if not mark or clash:
        raise ValueError(f"word separator {separator!r} cannot be told apart from target token(s) {clash[:5]}")


class CharIds:
    """A character-level source tokenizer's ids for plain ASCII words, without calling the tokenizer.

    `tokenizers` takes 12-25 us a word (normalizers, a regex pre-tokenizer, an Encoding with offsets
    handed to Python); reading a one-word request this way takes 7 us against 16, on the event loop. For the pipeline
    training/tokenize.py builds for `char` (NFKC, optional Lowercase, one piece per character, WordLevel)
    the ids of an ASCII word are a dict lookup per character: NFKC leaves ASCII unchanged, and Lowercase
    lowers ASCII as str.lower does. `ids` answers None where that is not certain (non-ASCII, a character
    outside the vocabulary, one that could begin an added token such as `<s>`), and the caller asks the
    tokenizer. `of` returns None for any other pipeline."""

    def __init__(self, vocab: dict[str, int], lowercase: bool, added_starts: str):
        self.vocab = {c: i for c, i in vocab.items() if len(c) == 1 and c.isascii() and c not in "\r\n"}
        self.lowercase = lowercase
        self.added_starts = added_starts  # first characters of the added tokens, matched before normalization

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> CharIds | None:
        spec = json.loads(tokenizer.to_str())
        norm, pre, model = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}, spec.get("model") or {}
        steps = [n.get("type") for n in norm.get("normalizers", [])] if norm.get("type") == "Sequence" else [norm.get("type")]
        char_split = pre == {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": False}
        is_char = steps in (["NFKC"], ["NFKC", "Lowercase"]) and char_split and model.get("type") == "WordLevel"
        if not is_char or spec.get("post_processor") is not None:
            return None
        added = "".join(sorted({t["content"][0] for t in spec.get("added_tokens", []) if t.get("content")}))
        return cls(model["vocab"], steps[-1] == "Lowercase", added)

    def ids(self, word: str) -> list[int] | None:
        if not word.isascii() or any(c in word for c in self.added_starts):
            return None
        try:
            return [self.vocab[c] for c in (word.lower() if self.lowercase else word)]
        except KeyError:
            return None


class TextReader:
    """Running text -> the words a word-level bundle's model can read, and back to one answer.

    Build it once per bundle, with the engine's tokenizers (service/text/requests.py `word_reader`,
    which builds one only for a bundle that declares `word_level_source`); call `words(text)` per
    request (raises TextError, a 422) and `join(answers)` to make generated_text.
    """

    def __init__(
        self,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer | None = None,
        max_chars: int = MAX_TEXT_CHARS,
        max_words: int = MAX_WORDS,
        separator: str = WORD_SEPARATOR,
    ):
        if tgt_tokenizer is not None:
            check_separator(tgt_tokenizer, separator)
        self.src_tokenizer = src_tokenizer
        self.unk_id = src_tokenizer.token_to_id("<unk>")
        self.char_ids = CharIds.of(src_tokenizer)  # None: every word goes through the tokenizer
        self.max_chars = max_chars
        self.max_words = max_words
        self.separator = separator

    def words(self, text: str, known: Container[str] | None = None) -> list[Word]:
        """The words of `text` with their source ids (`read`'s words)."""
        return self.read(text, known).words

    def read(self, text: str, known: Container[str] | None = None, punctuation: bool = False) -> Reading:
        """The words of `text` with their source ids, each checked readable by the source tokenizer (how long a word
        may be is the request layer's check, with the whole input's: service/text/requests.py `TextFrontEnd.units`),
        and what was skipped. `known`: the dictionary (a Lexicon), for the acronym rules; `punctuation`: keep the
        pauses' marks as words (`read_text`), which have no source ids.

        A word with a character the model cannot read is skipped too (the rules leave none for the default model's
        alphabet). Raises TextError when no word is left."""
        reading = read_text(text, self.max_chars, self.max_words, known, punctuation)
        words = reading.words
        # encode per word, not encode_batch: encode_batch gives up the GIL (to run in parallel), and an event loop that
        # gives it up waits for the engine thread to hand it back; a word is a few microseconds to encode
        char_ids, encode = self.char_ids, self.src_tokenizer.encode
        ids, unreadable = [], []
        for w in words:
            if w.punctuation:
                ids.append(())
                continue
            word_ids = char_ids.ids(w.text) if char_ids is not None else None
            if word_ids is None:
                enc = encode(w.text, add_special_tokens=False)
                word_ids = enc.ids
                if self.unk_id in word_ids:
                    unreadable += [w.text[a:b] for i, (a, b) in zip(word_ids, enc.offsets) if i == self.unk_id]
            ids.append(word_ids)
        kept, skipped = [], list(reading.skipped)
        for w, word_ids in zip(words, ids):
            if w.punctuation:
                kept.append(w)
            elif not word_ids or self.unk_id in word_ids:
                reason = f"{w.text!r} has characters this model cannot read"
                skipped.append(Skipped(w.start, w.end, text[w.start : w.end], reason))
            else:
                kept.append(Word(w.text, w.start, w.end, tuple(word_ids), w.pronunciation))
        if all(w.punctuation for w in kept):
            shown = ", ".join(repr(c) for c in dict.fromkeys(unreadable)) or ", ".join(repr(s.text) for s in skipped[:5])
            raise TextError(f"input contains no text this model can read: {shown}; remove or replace it")
        return Reading(kept, sorted(skipped, key=lambda s: s.start))

    def join(self, answers: Sequence[str]) -> str:
        """generated_text for the words' answers, in order."""
        return self.separator.join(answers)
