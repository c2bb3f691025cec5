"""What a token that needs no sentence context is read as: the verbaliser of each written form the tagger
(service/text/tokens.py) names. This module reads numbers, money, measures, fractions and symbols; dates, times,
telephone numbers, codes, addresses and electronic forms are read by service/text/forms.py.

Cardinals are American: no "and" inside them (123 one hundred twenty three), unless the reading asks for the British
one (`NUMBER_AND`, set by the reader for one text: one hundred and twenty three). num2words spells them; the words
these rules name are tables in service/text/rules.py.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from contextvars import ContextVar
from fractions import Fraction
from functools import lru_cache

from num2words import num2words

from attnserve.service.text import rules
from attnserve.service.text.rules import Currency
from attnserve.service.text.tokens import Token, next_token, prev_token

_SPELLED_SPLIT = re.compile(r"[\s,-]+")  # num2words writes "twenty-one", "one thousand, two hundred"
_SAID_AS_NUMBERS = {(9, 11), (7, 11)}  # dates and names written as fractions: "9/11" nine eleven
_BETWEEN = {"#", ":", "is", "was", "number", "no", "of", "-"}  # what may stand between "PIN" and its digits
PAUSE = "<pause>"  # a spoken item (",", PAUSE) is a pause between groups: a comma with `punctuation`, else nothing
NUMERIC = {  # kinds of token that are amounts: a hyphen between two of them is "to"
    "number",
    "measure",
    "currency",
    "coded",
    "time",
    "ordinal",
    "decade",
    "fraction",
    "mixed",
    "vulgar",
    "range",
}
Said = list  # words (str) or (word, fixed pronunciation) pairs, as a token's `spoken` takes them
# the reading's `number_and` (service/text/options.py), set by the reader around one text's verbalising (read_text):
# a context variable, not a parameter of every reader of a number, as it changes only the words num2words spells
NUMBER_AND: ContextVar[bool] = ContextVar("number_and", default=False)


def spelled(text: str, keep_and: bool | None = None) -> list[str]:
    """num2words' text as words, case folded, without the British "and" ("one hundred and twenty-one" -> one
    hundred twenty one) unless `keep_and` (None: the reading's NUMBER_AND) keeps it."""
    keep = NUMBER_AND.get() if keep_and is None else keep_and
    return [w for w in _SPELLED_SPLIT.split(text.casefold()) if w and (keep or w != "and")]


@lru_cache(maxsize=4096)
def _cardinal(n: int, keep_and: bool) -> tuple[str, ...]:
    return tuple(spelled(num2words(n, lang="en"), keep_and))


def cardinal(n: int) -> list[str]:
    """`n` as a cardinal's words: 21 -> twenty one, 123 -> one hundred twenty three."""
    return list(_cardinal(n, NUMBER_AND.get())) if -(10**15) < n < 10**15 else spelled(num2words(n, lang="en"))


@lru_cache(maxsize=1024)
def _ordinal(n: int, keep_and: bool) -> tuple[str, ...]:
    return tuple(spelled(num2words(n, lang="en", to="ordinal"), keep_and))


def ordinal(n: int) -> list[str]:
    """`n` as an ordinal's words: 3 -> third, 21 -> twenty first."""
    return list(_ordinal(n, NUMBER_AND.get()))


def year(n: int) -> list[str]:
    """A year: 1999 nineteen ninety nine, 1905 nineteen oh five, 2005 two thousand five, 2021 twenty twenty one."""
    return spelled(num2words(n, lang="en", to="year"))


def digits(text: str, names: tuple[str, ...] = rules.DIGITS) -> list[str]:
    """Each digit of `text` by name: "0042" zero zero four two (phone numbers: rules.PHONE_DIGITS, "oh")."""
    return [names[int(c)] for c in text if c.isdigit()]


def grouped(text: str, size: int = 4) -> Said:
    """A long digit string digit by digit in groups of `size`, a pause between groups (card numbers)."""
    out: Said = []
    for k in range(0, len(text), size):
        out += ([(",", PAUSE)] if k else []) + digits(text[k : k + size])
    return out


def decimal(text: str) -> list[str]:
    """A written number: `1,000` one thousand, `4.0` four point zero, `.5` point five, `3.14` three point one four."""
    whole, _, fraction = text.replace(",", "").partition(".")
    words = cardinal(int(whole)) if whole else []
    return [*words, "point", *digits(fraction)] if fraction else words


def _other(t: Token, tokens: list[Token], i: int) -> Said | None:
    ch = t.text
    prev, following = prev_token(tokens, i), next_token(tokens, i)
    if ch == "-" and (
        _between_numbers(t, prev, following) or _between_times(prev, following) or _between_amounts(prev, following)
    ):
        return list(rules.RANGE_WORD)  # "$10-$20", "2pm-5pm", "9 am - 5 pm", "$10 - $20"
    if ch == "#" and prev is not None and prev.end == t.start and prev.kind == "word" and prev.text in rules.SHARP_NAMES:
        return list(rules.SHARP_WORD)  # "C#", "F#": a language or a note
    if ch in "<>" and any(n is not None and n.kind in ("url", "email", "domain") for n in (prev, following)):
        if (prev is not None and prev.end == t.start) or (following is not None and following.start == t.end):
            return []  # "<https://example.org>": the brackets only mark the address
    return list(rules.SYMBOL_WORDS[ch]) if ch in rules.SYMBOL_WORDS else None


def _between_times(prev: Token | None, following: Token | None) -> bool:
    """A hyphen, spaced or not, after a time or its am/pm and before another time: "9 am - 5 pm", "9:00 - 17:00"."""
    if prev is None or following is None or following.kind not in ("time", "number"):
        return False
    return prev.kind == "time" or prev.text.lower() in rules.TIME_SUFFIXES


def _between_amounts(prev: Token | None, following: Token | None) -> bool:
    """A hyphen, spaced or not, between two sums of money: "$10 - $20"."""
    return prev is not None and following is not None and prev.kind == following.kind == "currency"


def _between_numbers(t: Token, prev: Token | None, following: Token | None) -> bool:
    """A hyphen written tight between two amounts or times: "$10-$20", "5pm-7pm"."""
    if prev is None or following is None or prev.end != t.start or following.start != t.end:
        return False
    before = prev.kind in NUMERIC or prev.text.lower() in rules.TIME_SUFFIXES or prev.text == "%"
    return before and following.kind in NUMERIC


def _number(t: Token, tokens: list[Token], i: int) -> Said:
    m = t.match
    words = ["minus"] if m["minus"] else []
    words += number_in_context(m["digits"], tokens, i)
    if m["nper"]:
        words += ["per", *rules.PER_UNITS[m["nper"]].split()]
    return words


def number_in_context(text: str, tokens: list[Token], i: int) -> Said:
    """A number as its neighbours say it is read: digit by digit after a word of rules.DIGIT_WORDS ("PIN 0042"),
    with a leading zero, as an emergency number ("911") or when longer than 15 digits (in fours); a house number
    before a street's name ("1428 Elm St." fourteen twenty eight); a year (1000-2999); else a cardinal or decimal."""
    if "," in text or "." in text:
        return decimal(text)
    prev = prev_token(tokens, i)
    after_digit_word = _after_digit_word(tokens, i)
    ending_in = prev is not None and prev.text == "in" and i > 1 and tokens[i - 2].text.lower() == "ending"
    if len(text) > 15:
        return grouped(text)
    if after_digit_word or ending_in or (len(text) > 1 and text[0] == "0") or text in rules.DIGIT_NUMBERS:
        return digits(text)
    if len(text) in (10, 11) and _nanp(text):  # "2125550147", "12125550147"
        groups = [text[:-10], text[-10:-7], text[-7:-4], text[-4:]]
        return [
            w for k, g in enumerate(x for x in groups if x) for w in ([(",", PAUSE)] if k else []) + digits(g, rules.PHONE_DIGITS)
        ]
    if 3 <= len(text) <= 5 and house_number_follows(tokens, i) or 3 <= len(text) <= 4 and after_pairs_word(tokens, i):
        return house_number(text)
    if 1000 <= int(text) <= 2999:
        return year(int(text))
    return cardinal(int(text))


def _after_digit_word(tokens: list[Token], i: int) -> bool:
    """Whether a word of rules.DIGIT_WORDS stands just before `tokens[i]`, perhaps with "is", "#", ":" or an airline's
    code between: "PIN 0042", "PIN is 4921", "Order #12345", "flight UA 870"."""
    for back in range(i - 1, max(-1, i - 4), -1):
        t = tokens[back]
        if t.kind == "word" and t.text.lower() in rules.DIGIT_WORDS:
            return True
        if not (t.text.lower() in _BETWEEN or (t.kind == "word" and t.text.isupper() and len(t.text) <= 3)):
            return False
    return False


def after_pairs_word(tokens: list[Token], i: int) -> bool:
    """Whether a word of rules.PAIRS_AFTER stands just before `tokens[i]`, its full stop between allowed: "Room 214",
    "Apt. 101", "Boeing 747"."""
    k = i - 2 if i >= 2 and tokens[i - 1].text == "." else i - 1
    return k >= 0 and tokens[k].kind == "word" and tokens[k].text.lower() in rules.PAIRS_AFTER


def _nanp(text: str) -> bool:
    """A North American number written as one run of digits: an area code and an exchange that start with 2-9,
    after a 1 when there are 11."""
    if len(text) == 11 and text[0] != "1":
        return False
    number = text[-10:]
    return number[0] in "23456789" and number[3] in "23456789"


def house_number_follows(tokens: list[Token], i: int) -> bool:
    """Whether `tokens[i]` starts an address: a capitalised name (or a direction, an ordinal) then a street type
    (rules.STREET_TYPES) within the next few words: "1428 Elm St.", "221B Baker Street", "708 N 1st St"."""
    names = 0
    for t in tokens[i + 1 : i + 6]:
        if t.kind == "other" and t.text == ".":
            continue
        if t.kind not in ("word", "ordinal"):
            return False
        if names and t.text.lower() in rules.STREET_TYPES:
            return True
        if t.kind == "word" and not t.text[0].isupper():
            return False
        names += 1
    return False


def house_number(text: str) -> list[str]:
    """A house number in pairs: 221 two twenty one, 708 seven oh eight, 1428 fourteen twenty eight, 1600 sixteen
    hundred, 200 two hundred."""
    n = int(text)
    if n < 100 or n % 100 == 0 and n < 1000:
        return cardinal(n)
    head, tail = divmod(n, 100)
    if tail == 0:
        return [*cardinal(head), "hundred"]
    return [*cardinal(head), *(["oh", *cardinal(tail)] if tail < 10 else cardinal(tail))]


def _measure(t: Token, tokens: list[Token], i: int) -> Said:
    """A number and the unit or magnitude right after it: `5kg` five kilograms, `1 km` one kilometer, `10k` ten
    thousand, `60 mg/kg` sixty milligrams per kilogram."""
    m = t.match
    number = m["mnum"]
    words = (["minus"] if m["mminus"] else []) + decimal(number)  # a cardinal, never a year: "2000 km"
    if m["mag"]:
        return [*words, rules.SHORT_MAGNITUDES[m["mag"].lower()]]
    forms = rules.UNITS[m["unit"]] if m["unit"] else rules.ATTACHED_UNITS[m["aunit"]]
    words += rules.reading(forms[number != "1"])
    if m["mper"]:
        words += ["per", *rules.reading(rules.PER_UNITS[m["mper"]])]
    return words


def fraction(num: int, den: int) -> list[str]:
    """`1/2` one half, `3/4` three quarters, `2/3` two thirds, `5/8` five eighths; `24/7` twenty four seven."""
    if den == 0:
        return [*cardinal(num), "over", "zero"]
    if den == 1:
        return [*cardinal(num), "over", "one"]
    if num >= den or (num, den) in _SAID_AS_NUMBERS:  # "24/7", "50/50", "9/11": not fractions anyone says
        return [*cardinal(num), *cardinal(den)]
    many = num != 1
    if den in rules.FRACTION_NAMES:
        name = rules.FRACTION_NAMES[den][many]
    else:
        name = " ".join(ordinal(den)) + ("s" if many else "")
    return [*cardinal(num), *name.split()]


def mixed(whole: int, num: int, den: int) -> list[str]:
    """A whole number and a fraction: `3 1/4` three and a quarter, `2½` two and a half, `1 3/4` one and three
    quarters."""
    if num == 1 and den > 1:
        name = rules.FRACTION_NAMES[den][0] if den in rules.FRACTION_NAMES else " ".join(ordinal(den))
        article = "an" if name[0] in "aeio" else "a"
        return [*cardinal(whole), "and", article, *name.split()]
    return [*cardinal(whole), "and", *fraction(num, den)]


def _fraction(t: Token, tokens: list[Token], i: int) -> Said:
    return fraction(int(t.match["num"]), int(t.match["den"]))


def _mixed(t: Token, tokens: list[Token], i: int) -> Said:
    m = t.match
    return mixed(int(m["xwhole"]), int(m["xnum"]), int(m["xden"]))


def _vulgar(t: Token, tokens: list[Token], i: int) -> Said:
    value = Fraction(unicodedata.numeric(t.text[-1])).limit_denominator(100)
    if t.match["whole"]:
        return mixed(int(t.match["whole"]), value.numerator, value.denominator)
    return fraction(value.numerator, value.denominator)


def money(amount_text: str, currency: Currency, magnitude: str | None = None) -> Said:
    """`$5` five dollars, `$5.50` five dollars and fifty cents, `$0.01` one cent, `$.25` twenty five cents,
    `$1.005` one point zero zero five dollars, `€2.5 million` two point five million euros: units and cents as a
    person says them, each counted in the singular or plural."""
    amount_text = amount_text.replace(",", "")
    whole_text, _, decimals = amount_text.partition(".")
    whole = int(whole_text or 0)

    def counted(n: int, forms: tuple[str, str]) -> Said:
        return [*cardinal(n), *rules.reading(forms[n != 1])]

    if magnitude is not None:
        scale = rules.MAGNITUDES.get(magnitude.lower()) or rules.SHORT_MAGNITUDES[magnitude.lower()]
        return [*decimal(amount_text), scale, *rules.reading(currency.unit[1])]
    if decimals and (currency.cent is None or len(decimals) != 2):  # not units and cents: the number, then the unit
        return [*decimal(amount_text), *rules.reading(currency.unit[1])]
    cents = int(decimals or 0)
    if not cents:
        return counted(whole, currency.unit)
    if not whole:
        return counted(cents, currency.cent)
    return [*counted(whole, currency.unit), "and", *counted(cents, currency.cent)]


def _currency(t: Token, tokens: list[Token], i: int) -> Said:
    m = t.match
    currency = rules.CURRENCY_CODES["USD"] if m["us"] and m["symbol"] == "$" else rules.CURRENCIES[m["symbol"]]
    words = money(m["amount"], currency, m["cmag"] or m["cshort"])
    if m["cper"]:
        words += ["per", *rules.reading(rules.PER_UNITS[m["cper"]])]
    return words


def _coded(t: Token, tokens: list[Token], i: int) -> Said:
    """An amount with an ISO 4217 code before or after it: `USD 100`, `100 EUR`."""
    m = t.match
    return money(m["camount"] or m["bamount"], rules.CURRENCY_CODES[m["code1"] or m["code2"]], m["kmag"])


def _decade(t: Token, tokens: list[Token], i: int) -> Said:
    """`1990s` nineteen nineties, `1900s` nineteen hundreds, `2000s` two thousands, `2010s` twenty tens, `80s` eighties."""
    text = t.match["dnum"] or t.match["sdecade"]  # "1990s", "the 1990 s"
    if len(text) == 2:
        return _plural(cardinal(int(text)))
    century, tens = int(text[:2]), int(text[2:])
    if tens:
        return [*cardinal(century), *_plural(cardinal(tens))]
    if century % 10 == 0:  # 1000s, 2000s
        return _plural(cardinal(int(text)))
    return [*cardinal(century), "hundreds"]


def _plural(words: list[str]) -> list[str]:
    last = words[-1]
    return [*words[:-1], last[:-1] + "ies" if last.endswith("y") else last + "s"]


def _hash(t: Token, tokens: list[Token], i: int) -> Said:
    following = next_token(tokens, i)
    return list(rules.HASH_BEFORE_NUMBER if following is not None and following.text[0].isdigit() else rules.HASH_BEFORE_WORD)


def _range(t: Token, tokens: list[Token], i: int) -> Said:
    low, high = t.match["low"], t.match["high"]
    if 3 <= len(low) <= 4 and len(high) <= 2 and after_pairs_word(tokens, i):  # "Boeing 787-9": a model, not a range
        return [*house_number(low), *cardinal(int(high))]
    read = [year(int(n)) if len(n) == 4 and 1000 <= int(n) <= 2999 else decimal(n) for n in (low, high)]
    if len(low) == 4 and len(high) == 2:  # "1960-80" nineteen sixty to eighty
        read[1] = cardinal(int(high))
    return [*read[0], *rules.RANGE_WORD, *read[1]]


def _days(t: Token, tokens: list[Token], i: int) -> Said:
    """A range of weekdays, "Mon-Fri" monday to friday; a full stop after the last is the abbreviation's when the
    text goes on in small letters or numbers ("Mon.-Fri. 9am-5pm"), not a sentence's end."""
    following = next_token(tokens, i)
    if following is not None and following.text == "." and following.start == t.end:
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        following.used_stop = after is not None and (after.text[0].isdigit() or after.text[0].islower())
    first, last = rules.WEEKDAYS[t.match["day1"].lower()], rules.WEEKDAYS[t.match["day2"].lower()]
    return [first, *rules.RANGE_WORD, last]


READERS: dict[str, Callable[[Token, list[Token], int], Said | None]] = {
    "other": _other,
    "ordinal": lambda t, tokens, i: ordinal(int(t.match["ordinal"].replace(",", ""))),  # "2,000th"
    "decade": _decade,
    "currency": _currency,
    "coded": _coded,
    "number": _number,
    "measure": _measure,
    "fraction": _fraction,
    "mixed": _mixed,
    "vulgar": _vulgar,
    "hash": _hash,
    "range": _range,
    "days": lambda t, tokens, i: _days(t, tokens, i),
    "slashed": lambda t, tokens, i: list(rules.SLASHED[t.text.lower()]),
    "version": lambda t, tokens, i: [*rules.VERSION_WORD, *decimal_parts(t.match["vnum"])],
    "dotnum": lambda t, tokens, i: ipv4(t.match["dotnum"]) or decimal_parts(t.match["dotnum"]),
}


def ipv4(text: str) -> list[str] | None:
    """An IPv4 address, `10.0.0.255` ten dot zero dot zero dot two five five: each part of one or two digits a
    number, of three digit by digit (as a code's digit runs); None when `text` is not four parts of 0-255."""
    parts = text.split(".")
    if len(parts) != 4 or any(int(p) > 255 or (len(p) > 1 and p[0] == "0") for p in parts):
        return None
    out: list[str] = []
    for k, part in enumerate(parts):
        out += (list(rules.URL_SYMBOLS["."]) if k else []) + (cardinal(int(part)) if len(part) <= 2 else digits(part))
    return out


def decimal_parts(text: str) -> list[str]:
    """`2.0` two point zero, `1.2.10` one point two point ten: each part a cardinal, "point" between."""
    out: list[str] = []
    for k, part in enumerate(text.split(".")):
        out += (["point"] if k else []) + cardinal(int(part))
    return out
