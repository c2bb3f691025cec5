"""Generated datasets: tasks other than G2P that the repository builds from its own code, no download.

- `numbers`: English number words -> digits, e.g. "forty-two thousand, one hundred and five" -> "42105".
  3,000 distinct whole numbers below 100,000, drawn with a fixed seed and spelt by num2words (a service
  dependency already), so every checkout gets the same pairs. Answers are short (4.9 characters on
  average) and made of ten symbols: the shape of digit, label and short-answer models.

`dataset: numbers` in a training config names it, as `dataset: cmudict` names the dictionary; the hash
split of training/data.py divides it into train, dev and test like any file of pairs.
"""

from __future__ import annotations

import random

NUMBERS = "numbers"
NUMBERS_PAIRS = 3000
NUMBERS_BELOW = 100_000
NUMBERS_SEED = 37


def number_pairs(n: int = NUMBERS_PAIRS, below: int = NUMBERS_BELOW, seed: int = NUMBERS_SEED) -> list[tuple[str, str]]:
    """`n` (number words, digits) pairs of distinct numbers in [0, below), in a fixed order."""
    from num2words import num2words

    numbers = random.Random(seed).sample(range(below), n)
    return [(num2words(x, lang="en"), str(x)) for x in numbers]


GENERATED = {NUMBERS: number_pairs}
