"""Written forms read by their own conventions: dates (`date_order`), times, telephone and card numbers, codes,
postcodes, arithmetic, and electronic forms (URLs, e-mail addresses, domains, file paths); and `read_token`, which
hands each tagged token (service/text/tokens.py) to its verbaliser here or in service/text/spoken.py.

Conventions (US English; docs/TEXT.md):
- dates: a month's name before the day reads "march third", the day first "the third of march"; numbers in
  `date_order` (`DATE_ORDERS`, the first the default), ISO 8601 year first; years as people say them (twenty twenty one);
- times: "ten thirty", "ten oh five", "nine o'clock"; with seconds "two hours fifteen minutes and thirty seconds";
- telephone numbers digit by digit in their groups, zero as "oh", a pause between groups; codes digit by digit
  with zero as "zero"; an alphanumeric code letter by letter, short digit runs as numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from attnserve.service.text import rules
from attnserve.service.text.spoken import (
    PAUSE,
    READERS,
    Said,
    after_pairs_word,
    cardinal,
    decimal,
    digits,
    house_number,
    house_number_follows,
    ordinal,
    year,
)
from attnserve.service.text.tokens import Token, next_token, prev_token

DATE_ORDERS = ("mdy", "dmy", "ymd")
DATE_KINDS = {"isodate", "numdate", "mdate", "dmdate"}
_VOWELS = set("aeiouy")
_PIECES = re.compile(r"[A-Za-z]+|[0-9]+|.")
_OPERATORS = {
    "-": ("minus",),
    "+": ("plus",),
    "*": ("times",),
    "×": ("times",),
    "/": ("divided", "by"),
    "÷": ("divided", "by"),
    "^": ("to", "the", "power", "of"),
    "=": ("equals",),
}


def read_token(t: Token, tokens: list[Token], i: int, date_order: str = DATE_ORDERS[0]) -> Said | None:
    """The words a token that needs no sentence context is read as (words, or (word, pronunciation) pairs, or
    (",", PAUSE) between groups); None for a symbol no table names. `date_order` orders a date written in numbers."""
    if t.kind in DATE_KINDS:
        return read_date(t, tokens, i, date_order)
    reader = READERS.get(t.kind) or _READERS.get(t.kind)
    if reader is None:
        raise RuntimeError(f"no rule reads a {t.kind!r} token")
    return reader(t, tokens, i)


# ---- dates and times ---------------------------------------------------------------------------------------------
def read_date(t: Token, tokens: list[Token], i: int, date_order: str) -> Said:
    """A date token in words (see the module's docstring); a numeric date no order makes valid is read as numbers."""
    m = t.match
    prev = prev_token(tokens, i)
    after_the = prev is not None and prev.text.lower() == "the"
    if t.kind == "mdate":
        return _month_day(rules.MONTHS[m[0].split()[0].rstrip(".").split("-")[0].lower()][1], int(m["mday"]), m["myear"])
    if t.kind == "dmdate":
        month = rules.MONTHS[m["dmon"].rstrip(".").lower()][1]
        return _day_of_month(month, int(m["dday"]), m["dyear"], after_the)
    if t.kind == "isodate":
        words = _month_day(int(m["im"]), int(m["id"]), m["iy"])
        if m["ih"]:
            words += clock(int(m["ih"]), int(m["imin"]), int(m["isec"]) if m["isec"] else None)
            zone = m["izone"]
            if zone == "Z":
                words += rules.reading("UTC")
            elif zone:
                words += ["plus" if zone[0] == "+" else "minus", *clock(int(zone[1:3]), int(zone[-2:]), None)]
        return words
    return _numeric_date(m["da"], m["db"], m["dy"], date_order, after_the)


def _numeric_date(a: str, b: str, y: str, date_order: str, after_the: bool) -> Said:
    if date_order == "ymd" and len(y) == 2:  # "21/03/04": the first part is the year
        a, b, y = b, y, a
    month, day = (int(b), int(a)) if date_order == "dmy" else (int(a), int(b))
    day_first = date_order == "dmy"
    if month > 12 and day <= 12:  # "31.12.2019", "25/12/2023": only one order is a date
        month, day, day_first = day, month, not day_first
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return [*cardinal(int(a)), *cardinal(int(b)), *cardinal(int(y))]
    if day_first:
        return _day_of_month(month, day, y, after_the)
    return _month_day(month, day, y)


def _year(text: str | None) -> list[str]:
    if not text:
        return []
    n = int(text)
    if len(text) == 2:  # "11/17/05" oh five
        return ["oh", *cardinal(n)] if n < 10 else cardinal(n)
    return year(n)


def _month_day(month: int, day: int, year_text: str | None) -> Said:
    """march third twenty twenty one."""
    if not 1 <= day <= 31:
        return [rules.MONTH_NAMES[month], *cardinal(day), *_year(year_text)]
    return [rules.MONTH_NAMES[month], *ordinal(day), *_year(year_text)]


def _day_of_month(month: int, day: int, year_text: str | None, after_the: bool) -> Said:
    """the third of march twenty twenty one ("the" once: "on the 3rd of March")."""
    return [*([] if after_the else ["the"]), *ordinal(day), "of", rules.MONTH_NAMES[month], *_year(year_text)]


def clock(hour: int, minute: int, second: int | None, suffix: bool = False) -> list[str]:
    """`10:30` ten thirty, `10:05` ten oh five, `10:00` ten o'clock (ten, before am or pm), `2:15:30` two hours
    fifteen minutes and thirty seconds."""
    if second is not None:
        return [
            *cardinal(hour),
            "hour" if hour == 1 else "hours",
            *cardinal(minute),
            "minute" if minute == 1 else "minutes",
            "and",
            *cardinal(second),
            "second" if second == 1 else "seconds",
        ]
    if minute == 0:
        return [*cardinal(hour), *([] if suffix else ["o'clock"])]
    return [*cardinal(hour), *(["oh", *cardinal(minute)] if minute < 10 else cardinal(minute))]


def _time(t: Token, tokens: list[Token], i: int) -> Said:
    m = t.match
    following = next_token(tokens, i)
    suffix = following is not None and following.kind in ("word", "dotted") and following.text.lower() in rules.TIME_SUFFIXES
    return clock(int(m["hour"]), int(m["minute"]), int(m["second"]) if m["second"] else None, suffix)


# ---- telephone numbers, cards, codes -----------------------------------------------------------------------------
def _phone(t: Token, tokens: list[Token], i: int) -> Said:
    """Digit by digit in the groups as written, zero as "oh", a pause between groups; "+" plus; an extension."""
    m = t.match
    main = t.text[: m.start("ext") - m.start()] if m["ext"] else t.text
    main = re.sub(r"[,\s]*(?:x|(?i:ext)\.?|(?i:extension))\s*$", "", main)
    out: Said = ["plus"] if main.startswith("+") else []
    for k, group in enumerate(re.findall(r"[0-9]+", main)):
        out += ([(",", PAUSE)] if k else []) + digits(group, rules.PHONE_DIGITS)
    if m["ext"]:
        out += [(",", PAUSE), "extension", *digits(m["ext"], rules.PHONE_DIGITS)]
    return out


def _card(t: Token, tokens: list[Token], i: int) -> Said:
    """A card number, an ISBN, a social security number: digit by digit in the groups as written."""
    out: Said = []
    for k, group in enumerate(re.findall(r"[0-9]+", t.text)):
        out += ([(",", PAUSE)] if k else []) + digits(group)
    return out


def letters(text: str) -> Said:
    """Each letter by its name, as a word with its fixed pronunciation (rules.LETTERS)."""
    return [(c, rules.LETTERS[c]) for c in text.lower() if c in rules.LETTERS]


def _code(t: Token, tokens: list[Token], i: int) -> Said:
    """An alphanumeric code: `UA123` U A one two three, `B2B` B two B, `COVID19` covid nineteen, `3D` three D; a
    house number with a letter before a street (`221B Baker St.`) two twenty one B."""
    out: Said = []
    pieces = re.findall(r"[A-Za-z]+|[0-9]+", t.text)
    house = pieces[0].isdigit() and house_number_follows(tokens, i)
    paired = after_pairs_word(tokens, i)  # "Room 214B", "Airbus A320"
    for k, p in enumerate(pieces):
        if p.isdigit():
            if house and k == 0 or paired and 3 <= len(p) <= 4:
                out += house_number(p)
            elif len(p) <= 2 and not (len(p) == 2 and p[0] == "0"):
                out += cardinal(int(p))
            elif len(p) == 4 and p[:2] in ("19", "20") and k:  # "FY2023": a year
                out += year(int(p))
            else:
                out += digits(p)
        elif p in rules.WORD_ACRONYMS:
            out += rules.WORD_ACRONYMS[p]
        elif p.isupper() or len(p) == 1 or not _VOWELS & set(p.lower()):
            out += letters(p)
        else:
            out.append(p.lower())
    return out


def _postcode(t: Token, tokens: list[Token], i: int) -> Said:
    """A UK postcode, character by character: `SW1A 1AA` S W one A, one A A."""
    outward, inward = t.text.split()
    out: Said = []
    for k, part in enumerate((outward, inward)):
        out += [(",", PAUSE)] if k else []
        out += [rules.DIGITS[int(c)] if c.isdigit() else (c.lower(), rules.LETTERS[c.lower()]) for c in part]
    return out


def _state_zip(t: Token, tokens: list[Token], i: int) -> Said:
    """A state's code and a ZIP code: `IL 62704` illinois six two seven zero four; ZIP+4 after a pause."""
    m = t.match
    out: Said = [*rules.reading(" ".join(rules.STATES[m["state"]]))]
    for k, part in enumerate(m["zip"].split("-")):
        out += ([(",", PAUSE)] if k else []) + digits(part)
    return out


# ---- arithmetic --------------------------------------------------------------------------------------------------
def _math(t: Token, tokens: list[Token], i: int) -> Said:
    """`7-3=4` seven minus three equals four, `2*8=16` two times eight equals sixteen."""
    out: Said = []
    for p in re.findall(r"[0-9]+(?:\.[0-9]+)?|\S", t.text):
        out += decimal(p) if p[0].isdigit() else list(_OPERATORS.get(p, ()))
    return out


def _power(t: Token, tokens: list[Token], i: int) -> Said:
    """`x^2` x squared, `10^3` ten cubed, `2^n` two to the power of n."""
    m = t.match
    base = cardinal(int(m["base"])) if m["base"].isdigit() else [m["base"].lower()]
    exp = m["exp"]
    if exp == "2":
        return [*base, "squared"]
    if exp == "3":
        return [*base, "cubed"]
    power = (["minus"] if exp[0] == "-" else []) + (
        cardinal(int(exp.lstrip("-"))) if exp.lstrip("-").isdigit() else [exp.lower()]
    )
    return [*base, "to", "the", "power", "of", *power]


def _height(t: Token, tokens: list[Token], i: int) -> Said:
    """`5'10"` five feet ten inches."""
    feet, inches = int(t.match["feet"]), int(t.match["inches"])
    return [*cardinal(feet), "foot" if feet == 1 else "feet", *cardinal(inches), "inch" if inches == 1 else "inches"]


def _ratio(t: Token, tokens: list[Token], i: int) -> Said:
    return [*cardinal(int(t.match["ra"])), "to", *cardinal(int(t.match["rb"]))]


def _dims(t: Token, tokens: list[Token], i: int) -> Said:
    """`2x4` two by four, `1920x1080` nineteen twenty by ten eighty."""
    m = t.match
    out: Said = []
    for k, n in enumerate(x for x in (m["da1"], m["da2"], m["da3"]) if x):
        out += (["by"] if k else []) + decimal(n)
    return out


# ---- electronic ------------------------------------------------------------------------------------------------
def address(text: str, kind: str) -> tuple[Said, list[tuple[int, int]]]:
    """A URL, e-mail address, domain or file path: its words read (a part in URL_SPELLED, a part with no vowel, a
    domain ending of rules.DOMAINS marked spelt: letter by letter), digits one by one, its punctuation as in
    URL_SYMBOLS ("dot", "slash", "at"); and each word's span in `text`."""
    out: Said = []
    spans: list[tuple[int, int]] = []
    pieces = list(_PIECES.finditer(text))
    texts = [p.group() for p in pieces]
    for k, piece in enumerate(pieces):
        p = piece.group()
        lower = p.lower()
        if p.isalpha():
            spelt = lower in rules.URL_SPELLED or not _VOWELS & set(lower) and len(p) <= 5 or len(p) == 1
            # a domain's ending: after a dot, at the end of the host ("acme.co.uk/contact")
            ending = k and texts[k - 1] == "." and (k + 1 == len(texts) or texts[k + 1] in "/:?#")
            spelt = spelt or (ending and kind != "path" and rules.DOMAINS.get(lower, False))
            if p in rules.WORD_ACRONYMS:
                words: Said = list(rules.WORD_ACRONYMS[p])
            else:
                words = letters(p) if spelt else [lower]
        elif p.isdigit():  # "bob123@x.org" bob one two three: a name's digits, not a quantity
            words = digits(p)
        else:
            words = list(rules.URL_SYMBOLS.get(p, ()))
        out += words
        spans += [piece.span()] * len(words)
    return out, spans


def _electronic(t: Token, tokens: list[Token], i: int) -> Said:
    words, t.pieces = address(t.text, t.kind)
    return words


def _plan(t: Token, tokens: list[Token], i: int) -> Said:
    """A retirement plan or a tax section, in pairs and letters: `401(k)` four oh one K, `501(c)(3)` five oh one C
    three."""
    m = t.match
    return [*house_number(m["pnum"]), *letters(m["pletter"]), *(cardinal(int(m["pdigit"])) if m["pdigit"] else [])]


_READERS: dict[str, Callable[[Token, list[Token], int], Said | None]] = {
    "plan": _plan,
    "time": _time,
    "phone": _phone,
    "card": _card,
    "groups": _card,
    "code": _code,
    "postcode": _postcode,
    "stzip": _state_zip,
    "math": _math,
    "power": _power,
    "ratio": _ratio,
    "height": _height,
    "dims": _dims,
    "mult": lambda t, tokens, i: [*decimal(t.match["mnumber"]), "times"],
    "url": _electronic,
    "email": _electronic,
    "domain": _electronic,
    "path": _electronic,
}
