"""The pieces of running text, each matched by one rule, with their spans in the original text (no torch).

`tokenize` cuts a prepared text (service/text/normalize.py `prepare`) into `Token`s; `TOKENS` holds the rules, one
named group each, tried in order. What a token is read as is set later: service/text/spoken.py for the tokens that
need no sentence context, service/text/words.py for the words read by their neighbours and their case.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from service.text import rules
from service.text.rules import CURRENCIES

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
TOKENS = re.compile(
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


def tokenize(prepared: str, origin: Sequence[int]) -> list[Token]:
    """The tokens of `prepared`, in order; `origin[k]` is the offset in the original text of prepared character k."""
    tokens: list[Token] = []
    for m in TOKENS.finditer(prepared):
        # each alternative of TOKENS is one named group around the others: the last to close names the rule
        tokens.append(Token(m.lastgroup, m.group(), origin[m.start()], origin[m.end() - 1] + 1, m))
    return tokens


def next_token(tokens: list[Token], i: int) -> Token | None:
    """The token after `tokens[i]`; None at the end."""
    return tokens[i + 1] if i + 1 < len(tokens) else None


def prev_token(tokens: list[Token], i: int) -> Token | None:
    """The token before `tokens[i]`; None at the start."""
    return tokens[i - 1] if i > 0 else None


def plain(words: list[str] | None) -> list[tuple[str, str | None]] | None:
    """Words as a token's `spoken`, none with a fixed pronunciation; None stays None (not read)."""
    return None if words is None else [(w, None) for w in words]
