"""Generated datasets: tasks other than G2P that the repository builds from its own code, no download.

- `numbers`: English number words -> digits, e.g. "forty-two thousand, one hundred and five" -> "42105".
  3,000 pairs: every number below 1,000 (so "seven" is taught, not left to chance) and 2,000 distinct
  numbers from 1,000 to 99,999 drawn with a fixed seed, spelt by num2words (a service dependency already),
  shuffled with the same seed, so every checkout gets the same pairs. Answers are short (4.2 characters
  on average, 1 to 5) and made of ten symbols: the shape of digit, label and short-answer models.

`dataset: numbers` in a training config names it, as `dataset: cmudict` names the dictionary; the hash
split of training/data.py divides it into train, dev and test like any file of pairs.
"""

from __future__ import annotations

import random

NUMBERS = "numbers"
NUMBERS_PAIRS = 3000
NUMBERS_ALL_BELOW = 1000  # every number below this is in the set
NUMBERS_BELOW = 100_000
NUMBERS_SEED = 37


def number_pairs(
    n: int = NUMBERS_PAIRS, below: int = NUMBERS_BELOW, seed: int = NUMBERS_SEED, all_below: int = NUMBERS_ALL_BELOW
) -> list[tuple[str, str]]:
    """`n` (number words, digits) pairs of distinct numbers in [0, below): all of [0, all_below) (as many as
    `n` allows), the rest drawn from [all_below, below); shuffled, in a fixed order for a given seed."""
    from num2words import num2words

    rng = random.Random(seed)
    small = list(range(min(all_below, below, n)))
    numbers = small + rng.sample(range(len(small), below), n - len(small))
    rng.shuffle(numbers)
    return [(num2words(x, lang="en"), str(x)) for x in numbers]


GENERATED = {NUMBERS: number_pairs}
