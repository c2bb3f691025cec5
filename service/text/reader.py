"""Running text -> the words a word-level model reads (no torch).

A bundle whose `bundle.json` says `"word_level_source": true` (G2P) reads one word at a
time. For such a bundle, a request's text is read as a TTS front end reads it. The rules
are below; the words they name are tables in service/text/rules.py, and docs/TEXT.md
lists both with examples. This module reads a text whole (limits, words, spans, skipped
characters, source ids); the rules are code in service/text/tokens.py (the pieces each rule
matches), service/text/spoken.py (numbers, money, times, symbols, addresses) and
service/text/words.py (words read by their neighbours and their case).

- Characters (service/text/normalize.py): Latin letters transliterated (é -> e, ß -> ss, Æ -> AE),
  typographic apostrophes made plain; a character no rule reads (emoji, other scripts, stray symbols)
  is skipped and reported (`Skipped`, a warning in the answer's details) -- a text is refused only
  when it holds such characters and nothing that can be read; punctuation alone reads as no words.
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
import unicodedata
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from attnserve.service.text import rules
from attnserve.service.text.forms import DATE_ORDERS, read_token
from attnserve.service.text.normalize import Skipped, prepare
from attnserve.service.text.options import DEFAULT_READING, ReadingOptions
from attnserve.service.text.pronounced import cased_word, dotted_names, possessive_word, written_word
from attnserve.service.text.rules import Currency
from attnserve.service.text.spoken import NUMBER_AND, PAUSE
from attnserve.service.text.tokens import Token, tokenize
from attnserve.service.text.words import all_caps_sentences, case_word, context_word

__all__ = ["Currency", "Reading", "Skipped", "TextError", "TextReader", "Word", "check_separator", "split_words", "read_text"]

WORD_SEPARATOR = " | "  # joins the words' answers in generated_text; '|' is in no G2P target token
MAX_TEXT_CHARS = 20_000  # longest text read in one request, in characters of the original text
# most words in one request, counted after numbers are spelt out: a 20,000-character text of about 3,500 written
# words, numbers and symbols among them, reads as up to twice as many
MAX_WORDS = 10_000
IDS_KEPT = 1 << 16  # distinct words whose source ids a reader keeps (`TextReader.ids`); more start the cache again


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
    ids: Callable[[str], tuple[int, ...]] | None = None,
    date_order: str = DATE_ORDERS[0],
    number_and: bool = False,
) -> Reading:
    """The words of `text` and the characters skipped. `known`: the dictionary's words (lower-case), which tells an
    acronym read as a word (NASA) from one spelt (GPU); None: no word is known. `punctuation`: keep the marks of
    rules.PAUSE_MARKS between the words, each run of them as one `Word` with `punctuation` set (where a TTS engine
    pauses); the full stop of an abbreviation is not one, and the groups of a telephone number are kept apart by
    commas. `ids`: each word's source ids, set as the word is made (`TextReader.read`); None: words have none.
    `date_order`: how a date written in numbers is ordered (one of forms.DATE_ORDERS); `number_and`: numbers read
    with the British "and" (one hundred and five).

    Raises TextError when `text` is longer than `max_chars`, has more than `max_words` words, or has none and
    skipped characters (punctuation alone has no words and no error).
    Does not check that the model can read them: `TextReader.read` does.
    """
    if not isinstance(text, str):
        raise TextError("input must be text")
    if date_order not in DATE_ORDERS:
        raise TextError(f"date_order must be one of {', '.join(DATE_ORDERS)}, got {date_order!r}")
    if len(text) > max_chars:
        raise TextError(
            f"input is {len(text)} characters long; at most {max_chars} are read per request (max_text_chars); "
            "send the text in parts"
        )
    if text.isascii() and text.isalpha() and text.islower() and not punctuation and text not in rules.ALONE_UNITS:
        # one plain lower-case word, the common request: what the rules below make of it
        return Reading([Word(text, 0, len(text), ids(text) if ids is not None else ())])
    prepared, origin = prepare(text)
    tokens = tokenize(prepared, origin)
    skipped: list[Skipped] = []
    convention = NUMBER_AND.set(number_and)
    try:
        _read_tokens(text, tokens, known, skipped, date_order)
    finally:
        NUMBER_AND.reset(convention)
    words: list[Word] = []
    n_words = 0
    for t in tokens:
        if punctuation and t.kind == "other" and not t.spoken and _is_pause(text, t):  # "9 am - 5 pm": a word, "to"
            if words and words[-1].punctuation and t.start <= words[-1].end:  # "?!", "...", "…": one mark
                last = words[-1]
                words[-1] = Word(last.text + t.text, last.start, max(last.end, t.end), punctuation=True)
            else:
                words.append(Word(t.text, t.start, t.end, punctuation=True))
            continue
        said = t.spoken
        if not said:
            continue
        if t.pieces is None:  # every word of the token has the token's span
            spans = [(t.start, t.end)] * len(said)
        else:  # offsets in the token's prepared text -> the original's
            at = t.match.start()
            spans = [(origin[at + a], origin[at + b - 1] + 1) for a, b in t.pieces]
        for (spoken, pronunciation), (start, end) in zip(said, spans):
            if pronunciation == PAUSE:  # between the groups of a telephone number
                if punctuation and words and not words[-1].punctuation:
                    words.append(Word(spoken, start, end, punctuation=True))
                continue
            words.append(Word(spoken, start, end, ids(spoken) if ids is not None else (), pronunciation))
        n_words += len(said)
        if n_words > max_words:
            raise TextError(
                f"input has more than {max_words} words; at most {max_words} are read per request (max_words); "
                "send the text in parts"
            )
    skipped = _merged(skipped)
    if not n_words and skipped:
        # punctuation alone ("--", "...": an LLM stream's chunk) reads as no words; what could not be read refuses it
        raise TextError(f"input has no words to read (skipped: {', '.join(repr(s.text) for s in skipped[:5])})")
    return Reading(words, skipped)


def _is_pause(text: str, t: Token) -> bool:
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
def _read_tokens(text: str, tokens: list[Token], known: Container[str] | None, skipped: list[Skipped], date_order: str) -> None:
    """Set each token's `spoken` words: first the written forms, which need no sentence context (numbers, dates,
    codes...: service/text/forms.py), then abbreviations and numerals (which look at their neighbours), then acronyms
    (which look at the sentence)."""
    for i, t in enumerate(tokens):
        if t.kind in ("word", "dotted"):
            continue
        try:
            said = read_token(t, tokens, i, date_order)
            t.spoken = None if said is None else [(w, None) if isinstance(w, str) else w for w in said]
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
            t.spoken = context_word(text, tokens, i)
    dotted_names(tokens)
    caps = all_caps_sentences(tokens)
    for i, t in enumerate(tokens):
        if t.kind == "word" and t.spoken is None:
            surface = text[t.start : t.end]
            # a table's word as written ("crème"), then mixed case read in parts ("WebGPU"): service/text/pronounced.py
            said = written_word(surface, t.text, known) or cased_word(t.text, known) or possessive_word(t.text, known)
            t.spoken = said or case_word(surface, t.text, caps[i], known)


def _skip_reason(ch: str) -> str:
    category = unicodedata.category(ch)
    if category.startswith("L"):
        return "a letter of a script this model does not read"
    if category.startswith("S"):
        return "a symbol or emoji with no spoken form"
    return "a character with no spoken form"


def check_separator(tgt_tokenizer: Tokenizer, separator: str = WORD_SEPARATOR) -> None:
    """Raise ValueError when a target token contains the separator's mark, so joined answers could
    not be split back into words (the G2P target vocabulary holds no '|')."""
    mark = separator.strip()
    clash = sorted(tok for tok in tgt_tokenizer.get_vocab() if mark and mark in tok)
    if not mark or clash:
        raise ValueError(f"word separator {separator!r} cannot be told apart from target token(s) {clash[:5]}")


def _shown(unreadable: list[str], skipped: list[Skipped]) -> str:
    """What a text that has nothing readable holds, for its error."""
    return ", ".join(repr(c) for c in dict.fromkeys(unreadable)) or ", ".join(repr(s.text) for s in skipped[:5])


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

    Build it once per bundle, with the engine's tokenizers (service/requests/frontend.py `word_reader`,
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
        self._ids: dict[str, tuple[int, ...]] = {}  # `ids`

    def words(self, text: str, known: Container[str] | None = None) -> list[Word]:
        """The words of `text` with their source ids (`read`'s words)."""
        return self.read(text, known).words

    def read(self, text: str, known: Container[str] | None = None, options: ReadingOptions = DEFAULT_READING) -> Reading:
        """The words of `text` with their source ids, each checked readable by the source tokenizer (how long a word
        may be is the request layer's check, with the whole input's: service/requests/frontend.py `RequestLayer.units`),
        and what was skipped. `known`: the dictionary (a Lexicon), for the acronym rules; `options`: the request's
        reading (service/text/options.py): `punctuation` keeps the pauses' marks as words (`read_text`), which have no
        source ids; `date_order` orders numeric dates; `number_and` reads numbers with the British "and".

        A word with a character the model cannot read is skipped too (the rules leave none for the default model's
        alphabet). Raises TextError when no word is left of a text that had some."""
        reading = read_text(
            text, self.max_chars, self.max_words, known, options.punctuation, self.ids, options.date_order, options.number_and
        )
        words, unk = reading.words, self.unk_id
        if all(w.source_ids and unk not in w.source_ids for w in words if not w.punctuation):  # the common case
            return reading
        kept, skipped, unreadable = [], list(reading.skipped), []
        for w in words:
            if w.punctuation or (w.source_ids and unk not in w.source_ids):
                kept.append(w)
                continue
            enc = self.src_tokenizer.encode(w.text, add_special_tokens=False)
            unreadable += [w.text[a:b] for i, (a, b) in zip(enc.ids, enc.offsets) if i == unk]
            reason = f"{w.text!r} has characters this model cannot read"
            skipped.append(Skipped(w.start, w.end, text[w.start : w.end], reason))
        if all(w.punctuation for w in kept):
            raise TextError(f"input contains no text this model can read: {_shown(unreadable, skipped)}; remove or replace it")
        return Reading(kept, sorted(skipped, key=lambda s: s.start))

    def ids(self, word: str) -> tuple[int, ...]:
        """A word's source ids, kept per distinct word (running text repeats its words; a tokenizer call costs
        12-25 us, `CharIds` a few)."""
        found = self._ids.get(word)
        if found is None:
            found = tuple(self.encode(word))
            if len(self._ids) >= IDS_KEPT:
                self._ids.clear()
            self._ids[word] = found
        return found

    def encode(self, word: str) -> list[int]:
        """The source ids of one word (or part of one) as `read` gives them."""
        ids = self.char_ids.ids(word) if self.char_ids is not None else None
        return ids if ids is not None else self.src_tokenizer.encode(word, add_special_tokens=False).ids

    def join(self, answers: Sequence[str]) -> str:
        """generated_text for the words' answers, in order."""
        return self.separator.join(answers)
