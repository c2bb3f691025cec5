"""The reader's tables: what a TTS front end says for abbreviations, acronyms, symbols, units, dates and the like.

Every rule of the reader (service/text/reader.py, tokens.py, spoken.py, forms.py, words.py) that names particular
words reads them from here, and each table is a TSV file in service/text/tables/, loaded once when this module is
imported: a reading is changed, or a table extended, by editing its file. Each file says in its first line what its
columns are; lines starting with `#` and blank lines are skipped. docs/TEXT.md lists every file with examples.

A *reading* (the last column of acronyms.tsv and brands.tsv, the words of units.tsv and currencies.tsv) is words
separated by spaces, a word in capitals spelt letter by letter ("E S T", "US dollars"), or ARPAbet phones with
stress digits ("JH EY1 S AH0 N"), the word's fixed pronunciation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TABLES = Path(__file__).with_name("tables")
_PHONES = re.compile(r"[A-Z]{1,2}[0-2]?(?: [A-Z]{1,2}[0-2]?)*")


def table(name: str) -> list[list[str]]:
    """The rows of tables/`name` (tab-separated columns, trailing empty columns dropped)."""
    rows = []
    for line in (TABLES / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(line.rstrip("\t").split("\t"))
    return rows


def column(name: str) -> set[str]:
    """The first column of tables/`name`."""
    return {row[0] for row in table(name)}


Spoken = tuple[tuple[str, str | None], ...]  # (word, fixed pronunciation or None) for each word read


@dataclass(frozen=True)
class Currency:
    """How an amount in one currency is said: `unit`s and, for two decimal places, `cent`s (none: the amount is
    read as a number). Each is (one, many); a form may be several words."""

    unit: tuple[str, str]  # one, many
    cent: tuple[str, str] | None = None


def _currencies() -> tuple[dict[str, Currency], dict[str, Currency]]:
    symbols, codes = {}, {}
    for row in table("currencies.tsv"):
        currency = Currency((row[1], row[2]), (row[3], row[4]) if len(row) > 3 else None)
        (codes if row[0].isalpha() else symbols)[row[0]] = currency
    return symbols, codes


# symbol before the amount -> how it is said ("$5", "€2.5 million"); ISO 4217 codes before or after it ("USD 5")
CURRENCIES, CURRENCY_CODES = _currencies()
MAGNITUDES = {r[0]: r[1] for r in table("magnitudes.tsv") if len(r) == 2}  # "2.5 million"
SHORT_MAGNITUDES = {r[0]: r[1] for r in table("magnitudes.tsv") if len(r) > 2}  # "$5m", "10k"
SYMBOL_WORDS = {r[0]: tuple(r[1].split()) for r in table("symbols.tsv")}
# "#" before a number is "number" ("#1"), before a word "hashtag" ("#tbt"), right after a letter that names a note or
# a language "sharp" ("C#", "F#"); alone it is skipped
HASH_BEFORE_NUMBER = ("number",)
HASH_BEFORE_WORD = ("hashtag",)
SHARP_WORD = ("sharp",)
SHARP_NAMES = set("ABCDEFG")
_UNIT_FLAGS = {r[0]: set(r[3].split(",")) if len(r) > 3 else set() for r in table("units.tsv")}
UNITS = {r[0]: (r[1], r[2]) for r in table("units.tsv") if "attached" not in _UNIT_FLAGS[r[0]]}  # "5 kg", "5kg"
ATTACHED_UNITS = {r[0]: (r[1], r[2]) for r in table("units.tsv") if "attached" in _UNIT_FLAGS[r[0]]}  # "5m", not "5 m"
ALONE_UNITS = {k for k, flags in _UNIT_FLAGS.items() if "alone" in flags}  # "tsp" teaspoons, with no number
# after "/" and an amount: what follows "per" ("$0.75/hr" per hour); every unit reads its singular
PER_UNITS = {**{k: v[0] for k, v in UNITS.items()}, **{r[0]: r[1] for r in table("per.tsv")}}
FRACTION_NAMES = {int(r[0]): (r[1], r[2]) for r in table("fractions.tsv")}

# key -> (before a capitalised word, after a capitalised word or a number, anywhere else)
ABBREVIATIONS = {r[0]: (r[1], r[2], r[3]) for r in table("abbreviations.tsv")}
_FLAGS = {r[0]: set(r[4].split(",")) for r in table("abbreviations.tsv") if len(r) > 4}
ABBREVIATIONS_NEED_STOP = {k for k, f in _FLAGS.items() if "stop" in f}  # without it they are words: "gen", "no"
ABBREVIATIONS_BEFORE_NUMBER_ONLY = {k for k, f in _FLAGS.items() if "number" in f}  # "No. 5" number five
ABBREVIATIONS_ALSO_WORDS = {k for k, f in _FLAGS.items() if "word" in f}  # at a text's end: "the Sun." stays a word
DOTTED = {r[0]: tuple(r[1].split()) for r in table("dotted.tsv")}
TIME_SUFFIXES = {r[0]: r[1] for r in table("time_suffixes.tsv")}
LETTERS = {r[0]: r[1] for r in table("letters.tsv")}

SPELLED_ACRONYMS = column("spelled_acronyms.tsv")
MAX_SPELLED_LETTERS = 5  # an unknown all-capital word this long or shorter is spelt; longer ones are read as words


def reading(text: str, written: str = "") -> Spoken:
    """A table's reading as spoken words: ARPAbet phones are the pronunciation of `written` (one word), a word in
    capitals is spelt."""
    if _PHONES.fullmatch(text) and any(c.isdigit() for c in text):
        return ((written.lower(), text),)
    out: list[tuple[str, str | None]] = []
    for word in re.sub(r"\b([A-Z]) (?=[A-Z]\b)", r"\1", text).split():  # "G P U": one word, spelt
        if word.isupper() and word.isalpha():
            out.append((word.lower(), " ".join(LETTERS[c] for c in word.lower())))
        elif word[:-1].isupper() and word.endswith("s") and len(word) > 1:  # "Ds": a spelt plural
            out.append((word.lower(), " ".join(LETTERS[c] for c in word[:-1].lower()) + " Z"))
        else:
            out.append((word.lower(), None))
    return tuple(out)


# all-capital words read as the table says, whatever the dictionary knows (an empty reading: the word itself)
WORD_ACRONYMS = {r[0]: reading(r[1], r[0]) if len(r) > 1 else ((r[0].lower(), None),) for r in table("acronyms.tsv")}
BRANDS = {r[0]: reading(r[1], r[0]) for r in table("brands.tsv")}  # mixed case, as written: "iOS", "eBay"

ROMAN_CARDINAL_AFTER = column("roman_cardinal_after.tsv")  # "World War II" two
ROMAN_REGNAL_NAMES = column("roman_regnal_names.tsv")  # "Henry VIII" the eighth
SENTENCE_OPENERS = column("sentence_openers.tsv")  # "Vitamin C. It": after a letter's stop, a sentence, not a surname
ACCENTED_WORDS = {r[0]: r[1] for r in table("accented_words.tsv")}

URL_SYMBOLS = {r[0]: tuple(r[1].split()) for r in table("url_symbols.tsv")}
URL_SPELLED = {"http", "https", "ftp", "www"}  # parts of a URL that are spelt
DOMAINS = {r[0]: len(r) > 1 for r in table("domains.tsv")}  # last part -> spelt ("wikipedia.org", "example.io")

MONTHS = {r[0]: (r[1], int(r[2])) for r in table("months.tsv")}  # "sept" -> ("september", 9)
MONTH_WORDS = {r[0] for r in table("months.tsv") if len(r) > 3 and "word" in r[3]}  # "may": a date only capitalised
MONTH_NAMES = {number: name for name, number in MONTHS.values()}
STATES = {r[0]: tuple(r[1].split()) for r in table("states.tsv")}  # "IL" illinois, before a ZIP code
STREET_TYPES = column("street_types.tsv")  # "1428 Elm St." a house number
STATE_WORDS = {r[0] for r in table("states.tsv") if len(r) > 2 and "word" in r[2]}  # "OK": a state only in a sentence
COMPASS_POINTS = {r[0]: tuple(r[1].split()) for r in table("compass_points.tsv")}  # "Ave NW" northwest
DIGIT_WORDS = column("digit_words.tsv")  # "PIN 0042", "flight 870": digit by digit
PAIRS_AFTER = column("pairs_after.tsv")  # "Room 214" two fourteen, "Boeing 747" seven forty seven: in pairs
WEEKDAYS = {r[0]: r[1] for r in table("weekdays.tsv")}  # "Mon-Fri" monday to friday
SLASHED = {r[0]: tuple(r[1].split()) for r in table("slashed.tsv")}  # "w/o" without
VOWELLESS_WORDS = column("vowelless_words.tsv")  # "brr", "psst": words, not acronyms to spell
DIGIT_NUMBERS = column("digit_numbers.tsv")  # "911" nine one one

# with `punctuation: true`, the marks kept between words as their own tokens (where a TTS engine pauses): sentence
# ends, phrase breaks, brackets and dashes ("-" only spaced, or written as a dash: "—")
PAUSE_MARKS = {".", ",", ";", ":", "!", "?", "(", ")", "-"}

# how a digit is said when a number is read digit by digit: codes, and telephone numbers ("oh" for zero)
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
PHONE_DIGITS = ("oh", *DIGITS[1:])
# "1990-1995", "2-3 cups": a hyphen between two numbers is read as "to"
RANGE_WORD = ("to",)
# "v2.0" version two point zero: a "v" before a dotted number
VERSION_WORD = ("version",)
