"""The pieces of running text, each matched by one rule, with their spans in the original text (no torch).

`tokenize` cuts a prepared text (service/text/normalize.py `prepare`) into `Token`s; `TOKENS` holds the rules, one
named group each, tried in order. What a token is read as is set later: service/text/spoken.py for the tokens that
need no sentence context, service/text/words.py for the words read by their neighbours and their case.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from attnserve.service.text import rules

_NUMBER = r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?"
_AMOUNT = _NUMBER + r"|\.[0-9]+"  # "$.25"
_VULGAR = "".join(  # ½ ¼ ⅞ ...: the vulgar fractions
    c for c in map(chr, range(0xA0, 0x2200)) if unicodedata.category(c) == "No" and "FRACTION" in unicodedata.name(c, "")
)


def _alternatives(keys: Iterable[str]) -> str:
    """A regex alternation of `keys`, longest first (so "lbs" is tried before "lb")."""
    return "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))


_UNITS = _alternatives(rules.UNITS)
_ATTACHED = _alternatives(rules.ATTACHED_UNITS)
_PER = rf"(?:/(?P<{{}}>{_alternatives(rules.PER_UNITS)})(?![A-Za-z]))?"  # "$0.75/hr": its group name to fill in
_MAGNITUDE = "|".join(rules.MAGNITUDES)
_SHORT_MAGNITUDE = _alternatives(rules.SHORT_MAGNITUDES)
_ATTACHED_MAGNITUDE = _alternatives(  # "10k", "5bn"; "5m" is five meters
    k for k in rules.SHORT_MAGNITUDES if k not in rules.ATTACHED_UNITS and len(k) > 1 or k == "k"
)
_CODES = _alternatives(rules.CURRENCY_CODES)
# "March", "Sept.", "FEB.", "june", "jul"; "may" and "march" only capitalised (in small letters they are words)
_MONTH = rf"(?:(?=[A-Z])(?i:{_alternatives(rules.MONTHS)})|(?:{_alternatives(set(rules.MONTHS) - rules.MONTH_WORDS)}))\b\.?"
_DOMAIN_END = _alternatives(rules.DOMAINS)  # lower-case only: "end.It" is two sentences, not a domain
_STATES = _alternatives(rules.STATES)
_WEEKDAY = rf"(?=[A-Z])(?i:{_alternatives(rules.WEEKDAYS)})"  # "Mon", "FRI", "Tues": capitalised or in capitals
_URL_TAIL = r"[^\s<>\"]*[^\s<>\".,;:!?)'\]]"
TOKENS = re.compile(
    rf"(?P<url>(?:(?i:https?|ftp)://|(?i:file):///?|(?i:www)\.){_URL_TAIL})"
    r"|(?P<email>[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})"
    rf"|(?P<domain>(?<![\w@./\\-])[A-Za-z0-9][\w-]*(?:\.[\w-]+)*\.(?:{_DOMAIN_END})(?:/{_URL_TAIL})?(?![\w@-]|\.[A-Za-z0-9]))"
    r"|(?P<path>(?<![\w/.:\\])(?:(?:~|\.{1,2})(?:/[\w.+-]+)+/?|[A-Za-z]:(?:\\[\w.+-]+)+\\?|(?:/[\w.+-]+){2,}/?))"
    # dates: ISO 8601 (and year first with "/"), numbers with date_order, a month's name before or after the day
    r"|(?P<isodate>(?<![\w./-])(?P<iy>[12][0-9]{3})(?P<isep>[-/.])(?P<im>0?[1-9]|1[0-2])(?P=isep)(?P<id>0?[1-9]|[12][0-9]|3[01])"
    r"(?:T(?P<ih>[01][0-9]|2[0-3]):(?P<imin>[0-5][0-9])(?::(?P<isec>[0-5][0-9])(?:\.[0-9]+)?)?(?P<izone>Z|[+-][0-9]{2}:?[0-9]{2})?)?"
    r"(?![\w/-]|\.[0-9]))"
    r"|(?P<numdate>(?<![\w./-])(?P<da>[0-9]{1,2})(?P<dsep>[/.-])(?P<db>[0-9]{1,2})(?P=dsep)(?P<dy>[12][0-9]{3}|(?<=/)[0-9]{2})"
    r"(?![\w/-]|\.[0-9]))"
    rf"|(?P<mdate>(?<!\w){_MONTH}(?:\s+|-)(?:the\s+)?(?P<mday>[0-3]?[0-9])(?:st|nd|rd|th)?(?![0-9:]|[.,][0-9])"
    r"(?:(?:,\s*|\s+|-)(?P<myear>[12][0-9]{3})(?![\w:]|[.,][0-9]))?)"
    rf"|(?P<dmdate>(?<![\w.,])(?P<dday>[0-3]?[0-9])(?:st|nd|rd|th)?(?:\s+of)?\s+(?P<dmon>{_MONTH})(?![A-Za-z])"
    r"(?:,?\s+(?P<dyear>[12][0-9]{3})(?![\w:]|[.,][0-9]))?)"
    # "10:30"; "7.30 p.m." with a dot only before am or pm
    r"|(?P<time>(?<![0-9:.])(?P<hour>[01]?[0-9]|2[0-3])(?::|\.(?=[0-5][0-9]\s?(?i:[ap]\.?m)\b))(?P<minute>[0-5][0-9])"
    r"(?::(?P<second>[0-5][0-9]))?(?![0-9:]))"
    r"|(?P<height>(?<![\w.'])(?P<feet>[0-9])'\s?(?P<inches>1[01]|[0-9])(?:\"|'')(?![\w]))"
    r"|(?P<ratio>(?<![\w:.])(?P<ra>[0-9]+):(?P<rb>[0-9]+)(?![0-9:]|\.[0-9]))"
    r"|(?P<card>(?<![\w-])[0-9]{4}(?P<csep>[ -])[0-9]{4}(?P=csep)[0-9]{4}(?P=csep)[0-9]{1,4}(?![\w-]))"
    # a retirement plan or a tax section: "401(k)", "501(c)(3)"
    r"|(?P<plan>(?<![\w.])(?P<pnum>[0-9]{3})\((?P<pletter>[A-Za-z])\)(?:\((?P<pdigit>[0-9]{1,2})\))?(?![\w(]))"
    # telephone numbers: NANP with or without +1, brackets, dashes, dots; +country and groups; a UK number of 0 and
    # groups; 555-1234; each with an extension. Groups joined by single spaces alone are numbers ("100 500 1000")
    r"|(?P<phone>(?:(?<![\w+])(?:\+?1[\s.-]?)?(?:\([0-9]{3}\)[\s.-]?|[0-9]{3}[\s.-])[0-9]{3}[\s.-][0-9]{4}"
    r"|(?<![\w+])\+[0-9]{1,3}(?:[\s.-]?\(?[0-9]{1,4}\)?){2,5}"
    r"|(?<![\w.])0[0-9]{2,4}[\s-][0-9]{3,4}[\s-]?[0-9]{3,4}"
    r"|(?<![\w.-])[0-9]{3}-[0-9]{4})(?![0-9])(?![\w-])"
    r"(?:,?\s*(?:x|(?i:ext)\.?|(?i:extension))\s?(?P<ext>[0-9]{1,6})(?![\w]))?)"
    r"|(?P<groups>(?<![\w.-])[0-9]+(?:-[0-9]+){3,}(?![\w-])|(?<![\w.-])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![\w-]))"
    rf"|(?P<currency>(?P<us>US\s?)?(?P<symbol>[{''.join(map(re.escape, rules.CURRENCIES))}])\s?(?P<amount>{_AMOUNT})"
    rf"(?:\s(?P<cmag>(?i:{_MAGNITUDE}))\b|(?P<cshort>(?i:{_SHORT_MAGNITUDE}))\b)?{_PER.format('cper')})"
    rf"|(?P<coded>(?<![\w.])(?:(?P<code1>{_CODES})\s?(?P<camount>{_NUMBER})|(?P<bamount>{_NUMBER})\s?(?P<code2>{_CODES}))"
    rf"(?:\s(?P<kmag>(?i:{_MAGNITUDE}))\b)?(?![\w]))"
    r"|(?P<version>(?<![A-Za-z0-9])[vV](?P<vnum>[0-9]+(?:\.[0-9]+)+)(?![\w.]))"
    r"|(?P<dotnum>(?<![\w.])[0-9]+(?:\.[0-9]+){2,}(?![\w]))"
    r"|(?P<math>(?<![\w.])-?[0-9]+(?:\.[0-9]+)?(?:\s?[-+*/×÷^]\s?-?[0-9]+(?:\.[0-9]+)?)+\s?=\s?-?[0-9]+(?:\.[0-9]+)?(?![\w.]))"
    r"|(?P<power>(?<![\w^])(?P<base>[A-Za-z]|[0-9]+)\^(?P<exp>-?[0-9]+|[A-Za-z])(?![\w^]))"
    r"|(?P<mixed>(?<![0-9/.,])(?P<xwhole>[0-9]+)[\s-](?P<xnum>[0-9]{1,2})/(?P<xden>[0-9]{1,2})(?![0-9/]))"
    rf"|(?P<vulgar>(?:(?P<whole>[0-9]+)\s?)?[{_VULGAR}])"
    r"|(?P<fraction>(?<![0-9/.,])(?P<num>[0-9]{1,3})/(?P<den>[0-9]{1,3})(?P<fsuf>(?i:(?:st|nd|rd|th)s?))?(?![0-9/A-Za-z]))"
    r"|(?P<range>(?<![\w.,-])(?P<low>[0-9]+)-(?P<high>[0-9]+)(?![\w-]|[.,][0-9]))"
    r"|(?P<dims>(?<![\w.])(?P<da1>[0-9]+(?:\.[0-9]+)?)\s?[x×]\s?(?P<da2>[0-9]+(?:\.[0-9]+)?)(?:\s?[x×]\s?(?P<da3>[0-9]+))?(?![\w.]))"
    rf"|(?P<mult>(?<![\w.])(?P<mnumber>{_NUMBER})x(?![\w]))"
    r"|(?P<decade>(?P<dnum>(?:1[0-9]|2[0-9])?[1-9]0|[12][0-9]00)'?s(?![A-Za-z])"
    r"|(?<=[Tt]he )(?P<sdecade>[12][0-9][0-9]0) s(?![\w']))"
    r"|(?P<ordinal>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:st|nd|rd|th)(?![A-Za-z])"
    rf"|(?P<days>(?<![\w.-])(?P<day1>{_WEEKDAY})\.?\s?[-–—]\s?(?P<day2>{_WEEKDAY})(?![\w-]))"  # "Mon-Fri"
    rf"|(?P<stzip>(?<!\w)(?P<state>{_STATES}),?\s(?P<zip>[0-9]{{5}}(?:-[0-9]{{4}})?)(?![\w-]))"
    r"|(?P<postcode>(?<!\w)[A-Z]{1,2}[0-9][A-Z0-9]?\s[0-9][A-Z]{2}(?!\w))"
    r"|(?P<code>(?<![\w.-])(?:[A-Za-z]+[0-9][A-Za-z0-9]*|[0-9]+[A-Za-z]+[0-9][A-Za-z0-9]*|[0-9]+[A-LN-Z])(?!\w))"
    rf"|(?P<measure>(?P<mminus>(?<![\w.,])-)?(?<![A-Za-z])(?P<mnum>{_NUMBER})"
    rf"(?:\s?(?P<unit>{_UNITS}){_PER.format('mper')}|(?P<aunit>{_ATTACHED})|(?P<mag>{_ATTACHED_MAGNITUDE}))(?![A-Za-z0-9]))"
    rf"|(?P<number>(?P<minus>(?<![\w.,])-)?(?P<digits>{_NUMBER}|\.[0-9]+(?![\w.])){_PER.format('nper')})"
    rf"|(?P<slashed>(?<![\w/])(?i:{_alternatives(rules.SLASHED)})(?![\w/]))"  # "w/o" without
    r"|(?P<hash>#)(?=[A-Za-z0-9])"
    r"|(?P<dotted>(?<![A-Za-z.])(?:[A-Za-z]\.){2,})"
    r"|(?P<word>[A-Za-z]+(?:'[A-Za-z]+)*)"
    r"|(?P<other>[^\sA-Za-z0-9'])"
)


@dataclass
class Token:
    """A piece of the text matched by one rule: `kind` names the rule (a group of TOKENS), `text` is the piece of
    the prepared text (case kept), `start`/`end` its offsets in the original."""

    kind: str
    text: str
    start: int
    end: int
    match: re.Match
    spoken: list[tuple[str, str | None]] | None = None  # (word, fixed pronunciation) once read; [] reads nothing
    used_stop: bool = False  # a full stop taken by the abbreviation before it
    pieces: list[tuple[int, int]] | None = None  # each spoken word's own span in `text` (URLs), else the token's


# Most tokens are plain words: a word that no rule before `word` can start (no month, state or currency code, and
# nothing after it but a space or a mark that ends it) is taken by this one pattern instead of TOKENS' 50 rules, tried
# at every position (spaces included). tests/text/test_tokens.py holds `tokenize` equal to TOKENS.finditer.
_PLAIN_WORD = re.compile(r"(?P<word>[A-Za-z]+(?:'[A-Za-z]+)*)(?=[\s,;!?)\]}\"]|\Z)")
_SPACES = re.compile(r"\s*")
_RULED_WORDS = frozenset(  # the words an earlier rule may start: dates, ZIP codes, amounts ("USD 5", "US $5"), days
    {m.lower() for m in rules.MONTHS} | set(rules.STATES) | set(rules.CURRENCY_CODES) | {"US"} | set(rules.WEEKDAYS)
)


def tokenize(prepared: str, origin: Sequence[int]) -> list[Token]:
    """The tokens of `prepared`, in order; `origin[k]` is the offset in the original text of prepared character k."""
    tokens: list[Token] = []
    pos, end = 0, len(prepared)
    while True:
        pos = _SPACES.match(prepared, pos).end()  # no rule starts with a space
        if pos >= end:
            return tokens
        m = _PLAIN_WORD.match(prepared, pos)
        if m is None or m.group() in _RULED_WORDS or m.group().lower() in _RULED_WORDS:
            m = TOKENS.search(prepared, pos)
            if m is None:
                return tokens
        # each alternative of TOKENS is one named group around the others: the last to close names the rule
        tokens.append(Token(m.lastgroup, m.group(), origin[m.start()], origin[m.end() - 1] + 1, m))
        pos = m.end()


def next_token(tokens: list[Token], i: int) -> Token | None:
    """The token after `tokens[i]`; None at the end."""
    return tokens[i + 1] if i + 1 < len(tokens) else None


def prev_token(tokens: list[Token], i: int) -> Token | None:
    """The token before `tokens[i]`; None at the start."""
    return tokens[i - 1] if i > 0 else None


def plain(words: list[str] | None) -> list[tuple[str, str | None]] | None:
    """Words as a token's `spoken`, none with a fixed pronunciation; None stays None (not read)."""
    return None if words is None else [(w, None) for w in words]
