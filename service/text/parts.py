"""A word read in parts: one too long for the model, or one whose model reading ended too early (no torch).

A word-level model reads one word of at most `max_source_len` source tokens (48 for the default bundle), and a long
word it has seldom seen can end its reading early ("Pneumonoultramicroscopicsilicovolcanoconiosis" read as five
phonemes). Such a word is read in parts, and the parts' readings are joined into the word's one answer:

- `split_word` cuts a word where it splits cleanly into dictionary words (`known`, the lexicon) or the combining
  forms of `MORPHEMES`, and cuts what is left by length (pieces of at most `MAX_UNKNOWN_PART` letters);
- `stopped_early` says whether a reading is implausibly short for its word: fewer than `MIN_PHONES_PER_LETTER`
  phonemes per letter, for a word of at least `MIN_CHECKED_LETTERS` letters.

The threshold is measured on the default bundle's lexicon (CMUdict): over its 23,686 words of 10 letters or more,
phonemes per letter have a median of 0.87, a 1st percentile of 0.60 and a 0.1th percentile of 0.50 (the least is
0.45). 0.60 is chosen: one real reading in a hundred falls below it (and is then read again in parts, whose answer is
kept only when it is longer), and a reading that stopped a third of the way through a long word does. Shorter words
vary too much ("through": 3 phonemes for 7 letters) for a threshold to tell.

A word that splits wholly into two or more dictionary words has a closer measure: its parts' readings together. Over
the 8,037 CMUdict words of 10 letters or more that `split_word` cuts so (the word itself left out of the dictionary),
the word's own phonemes are at least 0.67 of its parts' (a 0.1th percentile of 0.78, a 1st of 0.88, a median of
1.00); a reading under `MIN_SHARE_OF_PARTS`, the 1st percentile, has stopped early too ("hyperparameteroptimization":
16 phonemes, 0.62 a letter, against its parts' 22).
"""

from __future__ import annotations

from collections.abc import Container

MIN_PHONES_PER_LETTER = 0.60  # 1st percentile of phonemes/letters over CMUdict words of >= 10 letters (see above)
MIN_SHARE_OF_PARTS = 0.88  # 1st percentile of a word's phonemes over its dictionary parts' (see above)
MIN_CHECKED_LETTERS = 10  # shorter words are not checked: their ratios vary too widely
MAX_UNKNOWN_PART = 10  # longest piece read by the model that no table names (it reads words of this size well)
MIN_KNOWN_PART = 4  # shortest dictionary word taken as a part (CMUdict lists many 2- and 3-letter fragments)
MAX_KNOWN_PART = 24  # longest dictionary word or morpheme looked for (CMUdict's longest common words are shorter)
MAX_SPLIT_LETTERS = 128  # a longer "word" (a run of letters, not a word) is cut by length alone, at no search cost

# Greek and Latin combining forms and English affixes that long coined words are built of, each read well alone.
MORPHEMES = frozenset(
    """
    anti dis establish ment arian ism pneumono pneumo ultra micro scopic silico volcano coniosis
    super cali fragil istic expi ali docious hippo poto monstro sesquipedal ian phobia floccinaucinihilipil
    ification flocci nauci nihili pili hepato cardio vascular electro encephalo graph ography ology ologist
    photo synthesis thermo dynamic dynamics hydro chloro fluoro carbon methyl ethyl propyl benzene amino acid
    oxy deoxy ribo nucleic tetra hexa penta octa poly mono tri bi hyper hypo inter intra trans counter
    over under pseudo neuro psycho physio logical bio chemistry chemical geo magnetic radio tele
    ness less able ible tion sion ation ically ical ally ing ated ates ize ise izing ized
    """.split()
)


def letters(word: str) -> int:
    """The letters of a word (what its phonemes are weighed against)."""
    return sum(c.isalpha() for c in word)


def stopped_early(word: str, n_phones: int, parts_phones: int | None = None) -> bool:
    """Whether a reading of `n_phones` phonemes is implausibly short for `word` (see the module's docstring);
    `parts_phones`: the phonemes of its dictionary parts together, when it splits wholly into them (else None)."""
    n = letters(word)
    if n < MIN_CHECKED_LETTERS:
        return False
    return n_phones < MIN_PHONES_PER_LETTER * n or (parts_phones is not None and n_phones < MIN_SHARE_OF_PARTS * parts_phones)


def split_word(word: str, known: Container[str] | None = None, max_part: int = 48) -> list[str]:
    """`word` cut into parts that concatenate back to it, each of 2 to `max_part` characters: the fewest dictionary
    words (`known`, of at least MIN_KNOWN_PART letters) and MORPHEMES, with the rest cut into pieces of at most
    MAX_UNKNOWN_PART letters. A word of at most one piece comes back whole."""
    n = len(word)
    lower = word.lower()
    longest_unknown = min(MAX_UNKNOWN_PART, max_part)
    if n > MAX_SPLIT_LETTERS:
        return [word[k : k + longest_unknown] for k in range(0, n, longest_unknown)]
    longest = min(max(MAX_KNOWN_PART, longest_unknown), max_part)
    # best[i]: (cost, the start of the last part) of the cheapest cut of word[:i]; a named part costs 1, a piece
    # nothing names 3 and a little more the further it is from 7 letters (pieces of a common word's length)
    inf = float("inf")
    best: list[tuple[float, int]] = [(0.0, 0)] + [(inf, 0)] * n
    for end in range(2, n + 1):
        for start in range(max(0, end - longest), end - 1):
            if best[start][0] == inf:
                continue
            piece, size = lower[start:end], end - start
            if piece in MORPHEMES or (size >= MIN_KNOWN_PART and known is not None and piece in known):
                cost = 1.0
            elif size <= longest_unknown:
                cost = 3.0 + 0.1 * abs(size - 7)
            else:
                continue
            total = best[start][0] + cost
            if total < best[end][0]:
                best[end] = (total, start)
    if best[n][0] == inf:  # a word of one letter, or no cut fits: by length alone
        return [word[k : k + longest_unknown] for k in range(0, n, longest_unknown)] or [word]
    cuts, end = [], n
    while end > 0:
        start = best[end][1]
        cuts.append(word[start:end])
        end = start
    return cuts[::-1]


class InParts:
    """A warning for a word read in parts: `original[start:end]`, and why (too long for the model, or its reading
    ended early). It reads as the reader's `Skipped` does (start, end, text, message): both are `details.warnings`."""

    __slots__ = ("end", "reason", "start", "text")

    def __init__(self, start: int, end: int, text: str, reason: str):
        self.start, self.end, self.text, self.reason = start, end, text, reason

    @property
    def message(self) -> str:
        return f"read {self.text!r} at {self.start} in parts: {self.reason}"

    def __repr__(self) -> str:
        return f"InParts({self.start}, {self.end}, {self.text!r}, {self.reason!r})"
