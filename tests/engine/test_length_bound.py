"""The learned length bound: a source shorter than any training source takes the nearest longer length's
bound, not the margin alone ("3.3.21" cut to 3 tokens on a date model whose shortest training source was longer)."""

from attnserve.service.engine.bundle import bounded_length

BOUND = {"by_source_len": [0, 0, 0, 5, 7, 7, 9], "margin": 3}


def test_a_source_shorter_than_any_seen_takes_the_nearest_longer_bound():
    assert bounded_length(BOUND, 48, 1) == 5 + 3
    assert bounded_length(BOUND, 48, 3) == 5 + 3


def test_seen_and_longer_lengths_keep_their_own_bounds_within_max_target_len():
    assert bounded_length(BOUND, 48, 4) == 7 + 3
    assert bounded_length(BOUND, 48, 60) == 9 + 3  # past the table: its last entry
    assert bounded_length(BOUND, 10, 60) == 10
    assert bounded_length(None, 48, 1) is None
