"""benchmarks/score_served.py, the scorer that checks the default model from outside, reads the same test
split as the project's own evaluation, though it shares no code with it, and scores as the card says."""

import re

from attnserve.training.data import load_examples
from benchmarks import score_served as scorer


def test_its_test_split_is_the_projects_restricted_to_letters_and_apostrophes():
    outside = scorer.test_split()
    inside = {e.source: e.targets for e in load_examples("cmudict", "test") if re.fullmatch(r"[a-z']+", e.source)}
    assert len(outside) == len(inside) == 6198
    assert {w: [" ".join(p) for p in refs] for w, refs in outside.items()} == inside


def test_any_listed_pronunciation_counts_and_per_uses_the_nearest_one():
    words = {"tomato": [["T", "AH0", "M", "EY1", "T", "OW2"], ["T", "AH0", "M", "AA1", "T", "OW2"]], "cat": [["K", "AE1", "T"]]}
    answers = {"tomato": ["T", "AH0", "M", "AA1", "T", "OW0"], "cat": ["K", "AE1", "T"]}
    assert scorer.score(answers, words, strip=True) == {"wer": 0.0, "per": 0.0}  # stress aside, both right
    with_stress = scorer.score(answers, words, strip=False)
    assert with_stress["wer"] == 50.0  # tomato's stress differs from both listed forms
    assert abs(with_stress["per"] - 100 * 1 / 9) < 1e-9  # one edit against the nearer 6-phoneme form, + cat's 3
    assert scorer.edit_distance(["A", "B", "C"], ["A", "C", "D"]) == 2
