"""Where running text's sentences end: spans of the text, each one sentence, for a TTS voice that speaks one at a time.

A sentence ends at `!` or `?` (not before a small letter), `...`/`…` before a capital, and at a full stop, with any
closing quotes and brackets after the mark, before white space or the end of the text; and at a blank line. A full
stop does not end one after:
- a title that comes before a name (`Dr. Smith`, `Mr.`, `Prof.`: `TITLES`);
- an abbreviation (service/text/tables/abbreviations.tsv, dotted.tsv: `e.g.`, `etc.`, `U.S.`, `p.m.`) or an initial
  (`J. R. R. Tolkien`), unless the next word is capitalised and one that starts sentences (`STARTERS`: "at 5 p.m. He
  paid" is two sentences, "the U.S. Army" one);
- inside a number (`3.14`) or a dotted word (`U.S.A`), where no white space follows it.

`sentence_spans(text, final)` decides each end from the text up to the end of the word after it, so text that
arrives in pieces is cut where the whole text is cut (`final=False`: the spans settled so far, and where the
unsettled rest begins).
"""

from __future__ import annotations

import re

from attnserve.service.text.rules import ABBREVIATIONS, ABBREVIATIONS_BEFORE_NUMBER_ONLY, DOTTED

# titles and ranks before a name: a full stop after one never ends a sentence
TITLES = frozenset("Mr Mrs Ms Messrs Dr Prof Rev Hon Sen Rep Gov Pres Supt Mt Ft Gen Capt Col Lt Sgt Cpl Adm".split())
# capitalised words that begin sentences far more often than they follow an abbreviation inside one
STARTERS = frozenset(
    """I He She It We They You The A An This That These Those There Then But And So Or Yet If When While After Before
    As My His Her Its Our Their Your What Why How Where Is Are Was Were Do Does Did Can Will Would Should Could No Yes
    Not All Some Many Most Each Every Now Today Later Also However Still Please Let Here Meanwhile""".split()
)
_ABBREVIATIONS = frozenset(k.lower() for k in ABBREVIATIONS)
_DOTTED = frozenset(k.lower().rstrip(".") for k in DOTTED)
_BEFORE_NUMBER_ONLY = frozenset(k.lower() for k in ABBREVIATIONS_BEFORE_NUMBER_ONLY)

# a mark that may end a sentence, the quotes and brackets that close with it, then white space or the end
_END = re.compile(r"""([.!?…]+)(["'”’)\]»]*)(?=\s|$)""")
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_NEXT_WORD = re.compile(r"\s*(\S+)(\s|$)")
_EDGE = "\"'“”‘’()[]«»¿¡"


def _word_before(text: str, i: int) -> str:
    """The word that ends at text[i] (its opening quotes and brackets stripped)."""
    start = i
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:i].lstrip(_EDGE)


def _stops_after(word: str, following: str) -> bool:
    """Whether a full stop after `word` ends its sentence, `following` the next word (its edges stripped)."""
    if word in TITLES or (word.isupper() and word.title() in TITLES):
        return False
    low = word.lower()
    abbreviation = (
        "." in word.strip(".")
        or (len(word) == 1 and word.isalpha())
        or low in _DOTTED
        or (low in _ABBREVIATIONS and (low not in _BEFORE_NUMBER_ONLY or following[:1].isdigit()))
    )
    if not abbreviation:
        return True
    return following in STARTERS


def _ends_here(text: str, m: re.Match, final: bool) -> bool | None:
    """Whether the mark `m` ends a sentence; None: not decided until more text comes (the next word is unfinished)."""
    nxt = _NEXT_WORD.match(text, m.end())
    if nxt is None:  # nothing after it but white space
        return True if final else None
    if not nxt.group(2) and not final:  # the next word may go on in the next piece
        return None
    following = nxt.group(1).strip(_EDGE)
    mark = m.group(1)
    if "?" in mark or "!" in mark:  # unless the sentence goes on in small letters: '"Yes!" she said.'
        return not following[:1].islower()
    if mark != ".":  # an ellipsis: a pause inside a sentence unless a capital follows
        return following[:1].isupper()
    return _stops_after(_word_before(text, m.start()), following)


def sentence_spans(text: str, final: bool = True) -> tuple[list[tuple[int, int]], int]:
    """The sentences of `text` as (start, end) spans without their surrounding white space, in order, and the offset
    where the unsettled rest begins (len(text) when `final`: the end of the input ends the last sentence). A stretch
    with no letter or digit (a lone mark, an emoji) is no sentence."""
    spans, begin = [], 0
    ends = [(m.end(), _ends_here(text, m, final)) for m in _END.finditer(text)]
    ends += [(m.start(), True if (m.end() < len(text) or final) else None) for m in _BLANK_LINE.finditer(text)]
    for end, decided in sorted(ends):
        if decided is None:
            break
        if decided and end > begin:
            _add(text, begin, end, spans)
            begin = end
    else:
        if final:
            _add(text, begin, len(text), spans)
            begin = len(text)
    return spans, begin


def _add(text: str, begin: int, end: int, spans: list[tuple[int, int]]) -> None:
    piece = text[begin:end]
    start = begin + len(piece) - len(piece.lstrip())
    stop = begin + len(piece.rstrip())
    if any(c.isalnum() for c in text[start:stop]):
        spans.append((start, stop))
