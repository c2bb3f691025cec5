"""Running text -> the words a word-level model reads (no torch).

A bundle whose `bundle.json` says `"word_level_source": true` (G2P) reads one word at a
time. For such a bundle, a request's text is read as a TTS front end reads it:

- accents folded (`naïve` -> `naive`: Unicode NFKD, combining marks dropped), case folded,
  typographic apostrophes made plain (`don’t` -> `don't`);
- punctuation split off and dropped (`cat.` -> `cat`; hyphens split `well-known`), an
  apostrophe inside a word kept (`don't` stays one word);
- numbers spelt out by num2words: cardinals (`2` -> two, `1,000` -> one thousand,
  `3.5` -> three point five, `-4` -> minus four), four-digit numbers from 1000 to 2999
  without a comma as years (`1999` -> nineteen ninety-nine), decades (`1990s` -> nineteen
  nineties, `80s` -> eighties), ordinals (`2nd` -> second) and money as a person says it
  (`$5` -> five dollars, `£3.50` -> three pounds and fifty pence, `$0.01` -> one cent,
  `¥500` -> five hundred yen; dollars, pounds, euros, yen, rupees, won);
  digits inside a word are read apart (`b2b` -> b two b);
- `%`, `&`, `+`, `@` read as words; any other character stays in its word, and a character
  the source tokenizer cannot read is reported by name (TextError).

Each word keeps the span of the original text it came from (`2` and its `two` share it;
so do `$5` and both `five` and `dollars`). The model's answers for the words are joined
with WORD_SEPARATOR, which no target token contains (`check_separator`).

Limits (MAX_TEXT_CHARS, MAX_WORDS) are defaults that `TextReader`'s arguments override
(from the service settings).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from num2words import num2words
from tokenizers import Tokenizer

WORD_SEPARATOR = " | "  # joins the words' answers in generated_text; '|' is in no G2P target token
MAX_TEXT_CHARS = 1000  # longest text read in one request, in characters of the original text
MAX_WORDS = 100  # most words in one request, counted after numbers are spelt out


@dataclass(frozen=True)
class Currency:
    """How an amount in one currency is said: `unit`s and, for two decimal places, `cent`s (none: the amount is
    read as a number)."""

    unit: tuple[str, str]  # one, many
    cent: tuple[str, str] | None = None


# symbol before the amount -> how it is said
CURRENCIES = {
    "$": Currency(("dollar", "dollars"), ("cent", "cents")),
    "£": Currency(("pound", "pounds"), ("penny", "pence")),
    "€": Currency(("euro", "euros"), ("cent", "cents")),
    "¥": Currency(("yen", "yen")),
    "₹": Currency(("rupee", "rupees"), ("paisa", "paise")),
    "₩": Currency(("won", "won")),
}
SYMBOL_WORDS = {"%": "percent", "&": "and", "+": "plus", "@": "at"}
APOSTROPHES = {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'", "`": "'"}

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_TOKENS = re.compile(
    rf"(?P<currency>[{''.join(map(re.escape, CURRENCIES))}])\s?(?P<amount>{_NUMBER})"
    r"|(?P<decade>(?:1\d|2[0-9])?[1-9]0|[12]\d00)'?s(?![^\W\d_])"
    r"|(?P<ordinal>\d+)(?:st|nd|rd|th)(?![^\W\d_])"
    rf"|(?P<minus>(?<![\w.,])-)?(?P<number>{_NUMBER})"
    r"|(?P<word>[^\W\d_]+(?:'[^\W\d_]+)*)"
    r"|(?P<other>[^\s\w'])"
)
_SPELLED_SPLIT = re.compile(r"[\s,-]+")  # num2words writes "twenty-one", "one thousand, two hundred"


class TextError(ValueError):
    """The text cannot be read; the message says why and what to change (a 422 for a route)."""


@dataclass(frozen=True)
class Word:
    """A word as the model reads it, and where it came from: `original[start:end]`."""

    text: str  # normalised, numbers spelt out: "two" for "2"
    start: int
    end: int
    source_ids: tuple[int, ...] = ()  # its source token ids, once `TextReader.words` has read it


def fold(text: str) -> tuple[str, Sequence[int]]:
    """(accents and case folded text, for each of its characters the index in `text` it came from)."""
    if text.isascii():  # the common case, char for char: no marks to strip, casefold is lower, one apostrophe
        return text.lower().replace("`", "'"), range(len(text))
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        ch = APOSTROPHES.get(ch, ch)
        folded = _strip_marks(_strip_marks(ch).casefold())
        out.append(folded)
        origin.extend([i] * len(folded))
    return "".join(out), origin


def _strip_marks(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) != "Mn")


def split_words(text: str, max_chars: int = MAX_TEXT_CHARS, max_words: int = MAX_WORDS) -> list[Word]:
    """The words of `text`, in order (see the module's docstring for the rules).

    Raises TextError when `text` is longer than `max_chars`, has more than `max_words` words,
    or has none. Does not check that the model can read them: `TextReader.words` does.
    """
    if not isinstance(text, str):
        raise TextError("input must be text")
    if len(text) > max_chars:
        raise TextError(f"input is {len(text)} characters long; at most {max_chars} are read per request")
    if text.isascii() and text.isalpha():  # one plain word, the common request: what the rules below make of it
        return [Word(text.lower(), 0, len(text))]
    folded, origin = fold(text)
    words: list[Word] = []
    for m in _TOKENS.finditer(folded):
        start, end = origin[m.start()], origin[m.end() - 1] + 1
        try:
            spoken_words = _read(m)
        except (OverflowError, ValueError, ArithmeticError):  # num2words stops at 10**600 and the like
            number = text[start:end] if end - start <= 24 else text[start : start + 20] + "..."
            raise TextError(f"number {number!r} is too large to read; write it in words") from None
        for spoken in spoken_words:
            words.append(Word(spoken, start, end))
        if len(words) > max_words:
            raise TextError(f"input has more than {max_words} words; at most {max_words} are read per request")
    if not words:
        raise TextError("input has no words to read")
    return words


def _read(m: re.Match) -> list[str]:
    """The words one token of the text is read as."""
    if m["word"]:
        return [m["word"]]
    if m["other"]:
        ch = m["other"]
        if ch in SYMBOL_WORDS:
            return [SYMBOL_WORDS[ch]]
        if unicodedata.category(ch).startswith("P"):
            return []  # punctuation separates words and is not read
        return [ch]  # a symbol nobody reads aloud: left for the tokenizer check to name
    if m["ordinal"]:
        return _spelled(num2words(int(m["ordinal"]), lang="en", to="ordinal"))
    if m["decade"]:
        return _decade(m["decade"])
    if m["currency"]:
        return _money(m["amount"], CURRENCIES[m["currency"]])
    number = m["number"]
    if "," not in number and "." not in number and 1000 <= int(number) <= 2999:
        spoken = num2words(int(number), lang="en", to="year")
    else:
        value = Decimal(number.replace(",", ""))
        spoken = num2words(int(value) if value == value.to_integral_value() and "." not in number else value, lang="en")
    return (["minus"] if m["minus"] else []) + _spelled(spoken)


def _money(amount_text: str, currency: Currency) -> list[str]:
    """`$5` five dollars, `$5.50` five dollars and fifty cents, `$0.01` one cent, `$1.005` one point zero zero five
    dollars: units and cents as a person says them, each counted in the singular or plural."""
    amount = Decimal(amount_text.replace(",", ""))
    whole = int(amount)
    decimals = amount_text.partition(".")[2]

    def counted(n: int, forms: tuple[str, str]) -> list[str]:
        return [*_spelled(num2words(n, lang="en")), forms[n != 1]]

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

    def words(self, text: str) -> list[Word]:
        """The words of `text` with their source ids, each checked readable by the source tokenizer (how long a word
        may be is the request layer's check, with the whole input's: service/text/requests.py `TextFrontEnd.units`).

        Raises TextError naming the characters the model cannot read, or a word with no tokens."""
        words = split_words(text, self.max_chars, self.max_words)
        # encode per word, not encode_batch: encode_batch gives up the GIL (to run in parallel), and an event loop that
        # gives it up waits for the engine thread to hand it back; a word is a few microseconds to encode
        char_ids, encode = self.char_ids, self.src_tokenizer.encode
        ids, unreadable = [], []
        for w in words:
            word_ids = char_ids.ids(w.text) if char_ids is not None else None
            if word_ids is None:
                enc = encode(w.text, add_special_tokens=False)
                word_ids = enc.ids
                if self.unk_id in word_ids:
                    unreadable += [w.text[a:b] for i, (a, b) in zip(word_ids, enc.offsets) if i == self.unk_id]
            ids.append(word_ids)
        if unreadable:
            shown = ", ".join(repr(c) for c in dict.fromkeys(unreadable))
            raise TextError(f"input contains text this model cannot read: {shown}; remove or replace it")
        for w, word_ids in zip(words, ids):
            if not word_ids:
                raise TextError(f"word {w.text!r} has no tokens this model can read")
        return [Word(w.text, w.start, w.end, tuple(word_ids)) for w, word_ids in zip(words, ids)]

    def join(self, answers: Sequence[str]) -> str:
        """generated_text for the words' answers, in order."""
        return self.separator.join(answers)
