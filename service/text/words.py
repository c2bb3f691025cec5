"""Words read by their neighbours and by their case: abbreviations, Roman numerals, am/pm after a time, accented
and dotted words, acronyms spelt or read as words (no torch).

The words these rules name are tables in service/text/rules.py; service/text/reader.py's docstring lists the rules.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container

from num2words import num2words

from attnserve.service.text import rules
from attnserve.service.text.spoken import NUMERIC, cardinal, house_number_follows, spelled
from attnserve.service.text.tokens import Token, next_token, plain, prev_token

_ROMAN = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_SENTENCE_ENDS = {".", "!", "?"}
_LIST_JOINS = {",", "and", "or", "&"}


def _letters(word: str) -> str:
    """A word spelt out: its letters' names (rules.LETTERS)."""
    return " ".join(rules.LETTERS[c] for c in word.lower() if c in rules.LETTERS)


def _is_name(t: Token | None) -> bool:
    """A capitalised word: "Smith", "Main", "LOUIS"."""
    return t is not None and t.kind == "word" and t.text[0].isupper()


def _adjacent(a: Token, b: Token | None, text: str) -> bool:
    """Whether only spaces stand between two tokens."""
    return b is not None and not text[a.end : b.start].strip()


def context_word(text: str, tokens: list[Token], i: int) -> list[tuple[str, str | None]] | None:
    """A word read by its neighbours: an abbreviation, a Roman numeral, am/pm after a time, an accented word, a dotted
    abbreviation; None: read by case (`case_word`)."""
    t = tokens[i]
    word = t.text
    surface = text[t.start : t.end]
    prev = prev_token(tokens, i)
    if t.kind == "dotted":
        lower = word.lower()
        if lower in rules.DOTTED:
            return plain(list(rules.DOTTED[lower]))
        letters = lower.replace(".", "")
        return [(letters, _letters(letters))]
    accented = unicodedata.normalize("NFC", surface).lower()
    if accented in rules.ACCENTED_WORDS:
        return [(word.lower(), rules.ACCENTED_WORDS[accented])]
    if word in rules.BRANDS:
        return list(rules.BRANDS[word])
    if _initial(text, tokens, i):  # "Richard M. Stallman": the letter, its stop no sentence end
        tokens[i + 1].used_stop = True
        return [(word.lower(), rules.LETTERS[word.lower()])]
    if word == "A" and _letter_a(tokens, i):
        return [("a", rules.LETTERS["a"])]
    if _in_letter_run(text, tokens, i):  # "A M", "U S A", "C E Os": letters, as a spoken form spells them
        return [(word.lower(), _letters(word[0]) + (" Z" if len(word) > 1 else ""))]
    lower = word.lower()
    if lower in rules.TIME_SUFFIXES and prev is not None and prev.kind in ("time", "number") and _adjacent(prev, t, text):
        return [(lower, _letters(lower))]
    if word in rules.UNITS and prev is not None and prev.kind in NUMERIC and _adjacent(prev, t, text):
        # "3 1/4 lbs", "2-3 tsp": a unit after an amount the tagger did not join it to
        return list(rules.reading(rules.UNITS[word][prev.text != "1"]))
    if word in rules.ALONE_UNITS:
        return list(rules.reading(rules.UNITS[word][1]))
    place = _place(tokens, i)
    if place is not None:
        return plain(place)
    abbreviation = _abbreviation(text, tokens, i)
    if abbreviation is not None:
        return plain(abbreviation)
    if _ROMAN.fullmatch(word) and word.isupper():
        numeral = _roman(word, prev if prev is not None and _adjacent(prev, t, text) else None)
        if numeral is None and _in_numeral_list(tokens, i):  # "parts I, II and III"
            numeral = cardinal(_roman_value(word))
        if numeral is not None:
            return plain(numeral)
    return None


def _initial(text: str, tokens: list[Token], i: int) -> bool:
    """A capital letter and its full stop before a surname, after a given name or at a name's start: "Richard M.
    Stallman", "J. K. Rowling", "C. S. Lewis"; not "Elizabeth I. She" (a regnal numeral), nor "Vitamin C. It" (a
    sentence's first word of rules.SENTENCE_OPENERS after it)."""
    word = tokens[i].text
    if len(word) != 1 or not word.isupper() or i + 2 >= len(tokens):
        return False
    stop, after = tokens[i + 1], tokens[i + 2]
    if stop.text != "." or stop.start != tokens[i].end or not _adjacent(stop, after, text):
        return False
    prev = prev_token(tokens, i)
    if prev is not None and _is_name(prev) and prev.text.lower() in rules.ROMAN_REGNAL_NAMES and word in "IVX":
        return False
    if len(after.text) == 1 and after.text.isupper():  # "J. K. Rowling": the next initial decides
        return _initial(text, tokens, i + 2)
    return _is_name(after) and after.text.lower() not in rules.SENTENCE_OPENERS


def _in_numeral_list(tokens: list[Token], i: int) -> bool:
    """Whether `tokens[i]` is one of two or more Roman numerals joined by commas, "and" or "or", one of them of two
    letters or more: "volumes I, II and III", "IV or V"."""
    items = [i]
    for step in (-1, 1):
        j = i
        while True:
            k = j + step
            while 0 <= k < len(tokens) and tokens[k].text.lower() in _LIST_JOINS:
                k += step
            if k == j + step or not 0 <= k < len(tokens) or not _is_numeral(tokens[k]):
                break
            items.append(k)
            j = k
    return len(items) >= 2 and any(len(tokens[k].text) >= 2 for k in items)


def _is_numeral(t: Token) -> bool:
    """A Roman numeral a list may hold: of I, V, X and L ("MIX and DC" are words)."""
    return t.kind == "word" and set(t.text) <= set("IVXL") and _ROMAN.fullmatch(t.text) is not None


def _abbreviation(text: str, tokens: list[Token], i: int) -> list[str] | None:
    """An abbreviation of rules.ABBREVIATIONS read by its neighbours, its full stop taken; None: not one."""
    t = tokens[i]
    word = t.text
    key = next((k for k in (word, word.capitalize(), word.lower()) if k in rules.ABBREVIATIONS), None)
    if key is None or word not in (key, key.upper(), key.lower()):
        return None
    stop = next_token(tokens, i)
    has_stop = stop is not None and stop.text == "." and stop.start == t.end
    after = tokens[i + 2] if has_stop and i + 2 < len(tokens) else (None if has_stop else stop)
    stop_counts = has_stop and after is not None  # a full stop that ends the text may end a sentence instead
    written_as_title = word[0].isupper()
    prev = prev_token(tokens, i)
    street = key.lower() in rules.STREET_TYPES and _after_house_number(tokens, i)
    if (key in rules.ABBREVIATIONS_NEED_STOP or not written_as_title) and not (street and written_as_title):
        # a capitalised one may end the text ("Acme Co."), unless it is also a word ("the Sun.")
        at_end = has_stop and after is None and written_as_title and key not in rules.ABBREVIATIONS_ALSO_WORDS
        if not (stop_counts or at_end):
            return None
    if key in rules.ABBREVIATIONS_BEFORE_NUMBER_ONLY and not (after is not None and after.kind in ("number", "measure")):
        return None
    before_name, after_name, elsewhere = rules.ABBREVIATIONS[key]
    prev_adjacent = prev is not None and _adjacent(prev, t, text)
    prev_name = prev_adjacent and (_is_name(prev) or prev.kind in ("number", "ordinal", "code"))
    # "Elm St. It was...": a name inside the sentence before it, and the full stop ends the sentence
    ends_sentence = has_stop and prev_adjacent and (_in_sentence_name(tokens, i - 1) or prev.kind in ("number", "code"))
    if _is_name(after) and _adjacent(stop if has_stop else t, after, text) and not ends_sentence:
        reading = before_name
    elif prev_name:
        reading = after_name
    else:
        reading = elsewhere
    if has_stop and not (after is not None and after.kind == "word" and after.text[0].isupper() and reading == after_name):
        stop.used_stop = True  # taken by the abbreviation (it still ends a sentence when a capital follows "Main St.")
    return reading.split()


def _place(tokens: list[Token], i: int) -> list[str] | None:
    """A compass point in an address (rules.COMPASS_POINTS: "708 N 1st St" north, "Pennsylvania Ave NW" northwest), or a
    state's code after a city and its comma at a phrase's end ("Springfield, IL" illinois); None: neither."""
    t, prev, following = tokens[i], prev_token(tokens, i), next_token(tokens, i)
    word = t.text
    if prev is None:
        return None
    if word in rules.COMPASS_POINTS:
        before = tokens[i - 2] if prev.text == "." and i >= 2 else prev
        if prev.kind in ("number", "code") and house_number_follows(tokens, i - 1):
            return list(rules.COMPASS_POINTS[word])
        if (
            before.kind == "word"
            and before.text.lower() in rules.STREET_TYPES
            and _after_house_number(tokens, i - 1 - (before is not prev))
        ):
            return list(rules.COMPASS_POINTS[word])
    if word in rules.STATES and prev.text == "," and i >= 2 and _is_name(tokens[i - 2]):
        if word in rules.STATE_WORDS and not _in_sentence_name(tokens, i - 2):
            return None
        if following is None or following.kind == "other":
            return list(rules.STATES[word])
    return None


def _after_house_number(tokens: list[Token], i: int) -> bool:
    """Whether `tokens[i]` follows a house number, or a house number and a name: "5th Ave", "123 Main Ave"."""
    prev = prev_token(tokens, i)
    if prev is None:
        return False
    if prev.kind in ("number", "ordinal"):
        return True
    return _is_name(prev) and i >= 2 and tokens[i - 2].kind in ("number", "code")


def _single_letter(t: Token | None) -> bool:
    """A letter written alone ("A", "m"), or a capital's plural ("Os", "O's")."""
    if t is None or t.kind != "word":
        return False
    w = t.text
    return len(w) == 1 or (w[0].isupper() and w[1:] in ("s", "'s"))


def _in_letter_run(text: str, tokens: list[Token], i: int) -> bool:
    """Whether `tokens[i]` is one of two or more letters written apart: "A M", "u s a", "C E Os"."""
    t = tokens[i]
    if not _single_letter(t):
        return False
    prev, following = prev_token(tokens, i), next_token(tokens, i)
    before = _single_letter(prev) and len(prev.text) == 1 and _adjacent(prev, t, text)
    after = len(t.text) == 1 and _single_letter(following) and _adjacent(t, following, text)
    return before or after


def _letter_a(tokens: list[Token], i: int) -> bool:
    """Whether a capital "A" is the letter: inside a sentence and not before a capitalised word ("Plan A is", "4 A";
    not "A cat", "in A Tale of Two Cities")."""
    prev, following = prev_token(tokens, i), next_token(tokens, i)
    if prev is None or (prev.kind == "other" and prev.text in _SENTENCE_ENDS and not prev.used_stop):
        return False
    return following is None or following.kind != "word" or not following.text[0].isupper() and following.text != "I"


def _in_sentence_name(tokens: list[Token], i: int) -> bool:
    """A capitalised word that does not start its sentence ("Visit St. Louis": "Visit" is not a name)."""
    if not _is_name(tokens[i]):
        return False
    before = tokens[i - 1] if i > 0 else None
    return before is not None and not (before.kind == "other" and before.text in _SENTENCE_ENDS and not before.used_stop)


def _roman(numeral: str, prev: Token | None) -> list[str] | None:
    """A Roman numeral's reading by the word before it (rules.ROMAN_*); None: not a numeral here."""
    if prev is None or prev.kind != "word":
        return None
    value = _roman_value(numeral)
    name = prev.text.lower()
    if name in rules.ROMAN_REGNAL_NAMES and prev.text[0].isupper() and value < 50:  # not "Richard M"
        return ["the", *spelled(num2words(value, lang="en", to="ordinal"))]
    if name in rules.ROMAN_CARDINAL_AFTER:
        return cardinal(value)
    if prev.text[0].isupper() and len(numeral) >= 2 and set(numeral) <= set("IVX"):
        return cardinal(value)
    return None


def _roman_value(numeral: str) -> int:
    total = 0
    for k, c in enumerate(numeral):
        v = _ROMAN_VALUES[c]
        total += -v if k + 1 < len(numeral) and _ROMAN_VALUES[numeral[k + 1]] > v else v
    return total


def all_caps_sentences(tokens: list[Token]) -> list[bool]:
    """For each token, whether the sentence it stands in has two or more words and no small letter (a headline; one
    word alone, "IT", is not a sentence in capitals)."""
    out = [False] * len(tokens)
    begin = 0
    for i in range(len(tokens) + 1):
        t = tokens[i] if i < len(tokens) else None
        end_here = t is None or (t.kind == "other" and t.text in _SENTENCE_ENDS and not t.used_stop)
        if not end_here:
            continue
        words = [t.text for t in tokens[begin:i] if t.kind in ("word", "dotted")]
        caps = len(words) >= 2 and not any(c.islower() for w in words for c in w)
        for k in range(begin, i):
            out[k] = caps
        begin = i + 1
    return out


def _in_small_letters(word: str, letters: str) -> list[tuple[str, str | None]] | None:
    """An acronym written in small or mixed letters that the dictionary does not know: one of acronyms.tsv ("cuda",
    "Sql") as the table reads it, or a short word without a vowel ("npm", "ssh", "dns"; not one of
    vowelless_words.tsv, "psst") spelt; None: neither."""
    upper = word.upper()
    if upper in rules.WORD_ACRONYMS:
        return list(rules.WORD_ACRONYMS[upper])
    short = 2 <= len(letters) <= rules.MAX_SPELLED_LETTERS and letters.lower() not in rules.VOWELLESS_WORDS
    if short and not _VOWELS.intersection(letters.lower()):
        return [(word.lower(), _letters(upper))]
    return None


_VOWELS = frozenset("aeiouy")


def case_word(surface: str, word: str, sentence_in_capitals: bool, known: Container[str] | None) -> list[tuple[str, str | None]]:
    """A word read by its case: an all-capital word is spelt when the dictionary does not know it and it is short, or
    when it is a common word written as an acronym in a sentence not all in capitals; a word in small letters the
    dictionary does not know is read as an acronym when it is one (`_in_small_letters`); any other word is read as a
    word (lower-cased)."""
    lower = word.lower()
    letters = word.replace("'", "")
    if letters.isalpha() and not letters.isupper() and known is not None and lower not in known:
        small = _in_small_letters(word, letters)  # "cuda", "npm": an acronym the dictionary lacks, not a word
        if small is not None:
            return small
    if len(letters) < 2 or not word[0].isupper() or not letters.isalpha():
        return [(lower, None)]
    if letters.isupper():
        if word in rules.WORD_ACRONYMS:
            return list(rules.WORD_ACRONYMS[word])
        if word in rules.SPELLED_ACRONYMS:
            return [(lower, None if sentence_in_capitals else _letters(word))]
        if (known is None or lower not in known) and len(letters) <= rules.MAX_SPELLED_LETTERS and "'" not in word:
            return [(lower, _letters(word))]
        return [(lower, None)]
    stem = word[:-2] if word.endswith("'s") else word[:-1]
    if word[-1] in "sS" and len(stem) >= 2 and stem.isupper() and stem.isalpha() and len(stem) <= rules.MAX_SPELLED_LETTERS:
        # a plural or possessive acronym, "CEOs", "GPU's": read as the acronym is, then the plural's Z
        if stem in rules.WORD_ACRONYMS:
            said = list(rules.WORD_ACRONYMS[stem])
            if said[-1][1] is not None:
                return [*said[:-1], (said[-1][0] + "s", said[-1][1] + " Z")]
            return [*said[:-1], (said[-1][0] + "s", None)]
        if len(stem) <= 4 or known is None or stem.lower() not in known:
            return [(lower.replace("'", ""), _letters(stem) + " Z")]
    return [(lower, None)]
