"""How a request's text is read, whatever alphabet its answer is written in: `ReadingOptions`, frozen, each default
written here once.

Every front end (the TGI routes, the OpenAI routes, the in-process `Generator`, the phonemizer library) builds one
with `ReadingOptions.of`, from the values its wire format sent (None: not sent); the reader
(service/text/reader.py `TextReader.read`) and the request layer read it. A refusal names the option
(`date_order`); each front end says it in its own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from attnserve.service.errors import InvalidRequest
from attnserve.service.text.forms import DATE_ORDERS
from attnserve.service.text.language import check_language

PUNCTUATION_ON = frozenset({"espeak"})  # the alphabets whose readers (TTS voices) pause on the marks: kept by default


@dataclass(frozen=True)
class ReadingOptions:
    """A request's reading of its text."""

    lexicon: bool = True  # False: the model answers every word, even one the lexicon knows
    context: bool = True  # False: a heteronym reads as the lexicon's first entry, whatever its sentence
    punctuation: bool = False  # running text: sentence and phrase punctuation kept as units of their own between words
    date_order: str = DATE_ORDERS[0]  # the order of a date written in numbers (forms.DATE_ORDERS)
    number_and: bool = False  # True: British "and" in numbers (105 one hundred and five); US English reads none
    truncate: int | None = None  # keep the input's last `truncate` source tokens; None: all of it
    pronunciations: Mapping[str, str] | None = None  # word(s) -> phones, this request only
    pronunciations_alphabet: str | None = None  # how `pronunciations` are written; None: each one's detected
    language: str | None = None  # the text's language, en-us under one of its names (service/text/language.py); None: en-us

    def __post_init__(self) -> None:
        if self.date_order not in DATE_ORDERS:
            raise InvalidRequest(f"must be one of {', '.join(DATE_ORDERS)}, got {self.date_order!r}", "date_order")
        check_language(self.language)

    @classmethod
    def of(cls, alphabet: str | None = None, **sent: Any) -> ReadingOptions:
        """The options of what a front end was sent, every value None when not sent (its default here);
        `alphabet`: the answer's, which decides whether punctuation is kept when `punctuation` is not sent."""
        values = {k: v for k, v in sent.items() if v is not None}
        if "punctuation" not in values and alphabet in PUNCTUATION_ON:
            values["punctuation"] = True
        return cls(**values)


DEFAULT_READING = ReadingOptions()
READING_OPTIONS = tuple(f.name for f in fields(ReadingOptions))  # every option's name (the front ends' tables)
