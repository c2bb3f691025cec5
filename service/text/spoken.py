"""What a token that needs no sentence context is read as: numbers, ordinals, money, times, phone numbers,
versions, ranges, fractions, symbols, URLs and e-mail addresses, spelt out by num2words (no torch).

The words these rules name are tables in service/text/rules.py; service/text/reader.py's docstring lists the rules.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from fractions import Fraction

from num2words import num2words

from service.text import rules
from service.text.rules import CURRENCIES, Currency
from service.text.tokens import Token, next_token

_SPELLED_SPLIT = re.compile(r"[\s,-]+")  # num2words writes "twenty-one", "one thousand, two hundred"


def read_token(t: Token, tokens: list[Token], i: int) -> list[str] | None:
    """The words a token that needs no sentence context is read as; None for a symbol no table names."""
    m = t.match
    kind = t.kind
    if kind == "other":
        ch = t.text
        return list(rules.SYMBOL_WORDS[ch]) if ch in rules.SYMBOL_WORDS else None
    if kind == "ordinal":
        return spelled(num2words(int(m["ordinal"]), lang="en", to="ordinal"))
    if kind == "decade":
        return _decade(m["decade"])
    if kind == "currency":
        return _money(m["amount"], CURRENCIES[m["symbol"]], m["cmag"] or m["cshort"])
    if kind == "number":
        return (["minus"] if m["minus"] else []) + _number(m["digits"])
    if kind == "measure":
        return (["minus"] if m["mminus"] else []) + _measure(m)
    if kind == "time":
        return _time(m, next_token(tokens, i))
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
        following = next_token(tokens, i)
        return list(rules.HASH_BEFORE_NUMBER if following is not None and following.text[0].isdigit() else rules.HASH_BEFORE_WORD)
    if kind in ("url", "email"):
        words, t.pieces = _address(t.text)
        return words
    raise RuntimeError(f"no rule reads a {kind!r} token")


def _number(number: str) -> list[str]:
    if "," not in number and "." not in number and 1000 <= int(number) <= 2999:
        spoken = num2words(int(number), lang="en", to="year")
    else:
        value = Decimal(number.replace(",", ""))
        spoken = num2words(int(value) if value == value.to_integral_value() and "." not in number else value, lang="en")
    return spelled(spoken)


def cardinal(n: int) -> list[str]:
    """`n` as a cardinal's words: 21 -> twenty one."""
    return spelled(num2words(n, lang="en"))


def _dotted_number(text: str) -> list[str]:
    """`2.0` two point zero, `1.2.10` one point two point ten: each part a cardinal, "point" between."""
    out: list[str] = []
    for k, part in enumerate(text.split(".")):
        out += (["point"] if k else []) + cardinal(int(part))
    return out


def _measure(m: re.Match) -> list[str]:
    """A number and the unit or magnitude right after it: `5kg` five kilograms, `1 km` one kilometer, `10k` ten thousand."""
    number = m["mnum"]
    value = Decimal(number.replace(",", ""))
    # a cardinal, never a year: "2000 km" two thousand kilometers
    spoken = spelled(num2words(int(value) if "." not in number else value, lang="en"))
    if m["mag"]:
        return [*spoken, rules.SHORT_MAGNITUDES[m["mag"].lower()]]
    forms = rules.UNITS[m["unit"]] if m["unit"] else rules.ATTACHED_UNITS[m["aunit"]]
    return [*spoken, *forms[number != "1"].split()]


def _fraction(num: int, den: int) -> list[str]:
    """`1/2` one half, `3/4` three quarters, `2/3` two thirds, `5/8` five eighths."""
    if den == 0:
        return [*cardinal(num), "over", "zero"]
    if den == 1:
        return [*cardinal(num), "over", "one"]
    many = num != 1
    if den in rules.FRACTION_NAMES:
        name = rules.FRACTION_NAMES[den][many]
    else:
        ordinal = num2words(den, lang="en", to="ordinal")
        name = ordinal + "s" if many else ordinal
    return [*cardinal(num), *spelled(name)]


def _time(m: re.Match, following: Token | None) -> list[str]:
    """`10:30` ten thirty, `10:05` ten oh five, `10:00` ten o'clock (ten, before am or pm), `10:30:15` ten thirty and
    fifteen seconds."""
    hour, minute = int(m["hour"]), int(m["minute"])
    words = cardinal(hour)
    suffix = following is not None and following.kind in ("word", "dotted") and following.text.lower() in rules.TIME_SUFFIXES
    if minute == 0:
        words += [] if suffix or m["second"] else ["o'clock"]
    elif minute < 10:
        words += ["oh", *cardinal(minute)]
    else:
        words += cardinal(minute)
    if m["second"]:
        second = int(m["second"])
        words += ["and", *cardinal(second), "second" if second == 1 else "seconds"]
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
            words = cardinal(int(p)) if len(p) <= 4 else [rules.DIGITS[int(c)] for c in p]
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
        return [*spelled(num2words(n, lang="en")), forms[n != 1]]

    if magnitude is not None:
        scale = rules.MAGNITUDES.get(magnitude.lower()) or rules.SHORT_MAGNITUDES[magnitude.lower()]
        return [*spelled(num2words(amount if decimals else whole, lang="en")), scale, currency.unit[1]]
    if decimals and (currency.cent is None or len(decimals) != 2):  # not units and cents: the number, then the unit
        return [*spelled(num2words(amount, lang="en")), currency.unit[1]]
    cents = int(decimals or 0)
    if not cents:
        return counted(whole, currency.unit)
    if not whole:
        return counted(cents, currency.cent)
    return [*counted(whole, currency.unit), "and", *counted(cents, currency.cent)]


def _decade(digits: str) -> list[str]:
    """`1990s` nineteen nineties, `1900s` nineteen hundreds, `2000s` two thousands, `2010s` twenty tens, `80s` eighties."""
    if len(digits) == 2:
        return spelled(_plural(num2words(int(digits), lang="en")))
    century, tens = int(digits[:2]), int(digits[2:])
    if tens:
        return [*spelled(num2words(century, lang="en")), *spelled(_plural(num2words(tens, lang="en")))]
    if century % 10 == 0:  # 1000s, 2000s
        return spelled(_plural(num2words(int(digits), lang="en")))
    return [*spelled(num2words(century, lang="en")), "hundreds"]


def _plural(spoken: str) -> str:
    return spoken[:-1] + "ies" if spoken.endswith("y") else spoken + "s"


def spelled(text: str) -> list[str]:
    """num2words' text as words, case folded: "twenty-one" -> twenty one."""
    return [w for w in _SPELLED_SPLIT.split(text.casefold()) if w]
