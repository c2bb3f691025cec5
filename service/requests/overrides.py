"""A request's own pronunciations (`parameters.pronunciations`, checked by service/text/pronunciations.py) applied to
its units: the words a key names get the key's answer, as a lexicon answer; the units of one word (an acronym read
letter by letter) or of a key of several words ("New York") become one unit whose span covers them.
"""

from __future__ import annotations

from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.requests.units import Unit, lexicon_answer
from attnserve.service.text.pronunciations import MAX_KEY_WORDS, Pronunciations
from attnserve.service.text.reader import Word


def pronounce(engine: Engine, inputs: str, units: list[Unit], found: Pronunciations, options: DecodingOptions) -> list[Unit]:
    """Give the words a request's pronunciations (checked: service/text/pronunciations.py) name their answer; the
    words that share the span of a matching key (an acronym read letter by letter), or that a key of several
    words matches ("New York"), become one."""
    groups = word_groups(units)
    out: list[Unit] = []
    k = 0
    while k < len(groups):
        group, n = groups[k], 1
        phrase = found.find_phrase(group_words(inputs, groups[k : k + MAX_KEY_WORDS])) if found.phrases else None
        original = group_words(inputs, [group])[0][0]
        if phrase is not None:
            n, ids = phrase
            pronounced = [(merged_unit(inputs, [u for g in groups[k : k + n] for u in g]), ids)]
        elif len(group) > 1 and (ids := found.find(original)) is not None:  # the whole span is the key
            pronounced = [(merged_unit(inputs, group), ids)]
        else:
            pronounced = [(u, found.find(original, u.text)) for u in group]
        for u, ids in pronounced:
            if ids is not None:
                u.known = [lexicon_answer(engine, ids, options.max_new_tokens, options.stop)]
                u.given = found.given.get(ids)
            out.append(u)
        k += n
    return out


def word_groups(units: list[Unit]) -> list[list[Unit]]:
    """The units in groups of one word of the input each: the units that share a span (an acronym read letter by
    letter) together, every other unit alone."""
    groups: list[list[Unit]] = []
    for u in units:
        last = groups[-1][0].word if groups else None
        if u.word is not None and last is not None and (last.start, last.end) == (u.word.start, u.word.end):
            groups[-1].append(u)
        else:
            groups.append([u])
    return groups


def group_words(inputs: str, groups: list[list[Unit]]) -> list[tuple[str, str]]:
    """Each group's word as a key is matched with it: its text in the input, and as read."""
    out = []
    for group in groups:
        w = group[0].word
        original = inputs[w.start : w.end] if w is not None else group[0].text.strip()
        out.append((original, " ".join(u.text for u in group)))
    return out


def merged_unit(inputs: str, units: list[Unit]) -> Unit:
    """Several units answered as one word (a key's pronunciation): its span covers theirs."""
    start, end = units[0].word.start, units[-1].word.end
    source_ids = [i for u in units for i in u.source_ids]
    word = Word(inputs[start:end], start, end, tuple(source_ids))
    return Unit(word.text, word, source_ids, [])


IPA_FAMILY = ("ipa", "espeak")  # detection cannot tell espeak-ng's IPA from IPA: either is read as "ipa"


def as_given(u: Unit, form) -> str | None:
    """The text a request's pronunciation of unit `u` is answered with as written: where it was written in IPA (or
    espeak-ng's IPA) and the answer is espeak-ng's IPA, with stress on (the marks it was given are its stress and
    length, which espeak's own rendering of the phones would change); else None, and the answer's form (`form`:
    service/requests/alphabets.py's OutputForm) writes its phones, as alphabet "ipa" always does."""
    if u.given is None or form is None or not form.stress:
        return None
    text, read_as = u.given
    return text if read_as in IPA_FAMILY and form.alphabet == "espeak" else None
