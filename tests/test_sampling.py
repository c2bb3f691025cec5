"""The shared sampler: filters, one uniform per step, reproducibility by seed."""

import numpy as np
import pytest

from service.sampling import (
    SamplingParams,
    apply_repetition_penalty,
    filtered_logits,
    greedy_token,
    log_softmax,
    sample_token,
    top_k_filter,
    top_p_filter,
)


class CountingRng:
    """Wraps a Generator and counts the uniforms drawn."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    def random(self):
        self.calls += 1
        return self.rng.random()


def test_sample_token_draws_exactly_one_uniform_per_step():
    rng = CountingRng(0)
    logits = np.random.default_rng(1).normal(size=50)
    for params in (SamplingParams(), SamplingParams(top_k=5), SamplingParams(top_p=0.5, temperature=0.7)):
        before = rng.calls
        sample_token(logits, rng, params, previous_ids=[1, 2])
        assert rng.calls == before + 1


def test_same_seed_gives_same_ids_and_inverse_cdf_matches_manual_computation():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    a = [sample_token(logits, np.random.default_rng(7), SamplingParams()) for _ in range(3)]
    assert len(set(a)) == 1
    u = np.random.default_rng(7).random()
    expected = int(np.searchsorted(np.cumsum([0.1, 0.2, 0.3, 0.4]), u, side="right"))
    assert a[0] == expected


def test_sampling_frequencies_follow_the_distribution():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    rng = np.random.default_rng(123)
    draws = np.array([sample_token(np.log(probs), rng, SamplingParams()) for _ in range(20000)])
    freq = np.bincount(draws, minlength=4) / len(draws)
    assert np.allclose(freq, probs, atol=0.015)


def test_top_k_keeps_only_the_k_best_and_never_samples_outside():
    logits = np.array([0.0, 5.0, 1.0, 4.0, 3.0])
    kept = top_k_filter(logits, 2)
    assert np.isfinite(kept).tolist() == [False, True, False, True, False]
    rng = np.random.default_rng(0)
    draws = {sample_token(logits, rng, SamplingParams(top_k=2)) for _ in range(500)}
    assert draws == {1, 3}


def test_top_k_ties_break_towards_lower_id():
    kept = top_k_filter(np.array([1.0, 2.0, 2.0, 2.0]), 2)
    assert np.isfinite(kept).tolist() == [False, True, True, False]


def test_top_p_keeps_smallest_set_reaching_p():
    probs = np.array([0.05, 0.5, 0.3, 0.15])
    kept = top_p_filter(np.log(probs), 0.7)  # 0.5 < 0.7, 0.5 + 0.3 >= 0.7
    assert np.isfinite(kept).tolist() == [False, True, True, False]
    kept = top_p_filter(np.log(probs), 0.01)  # always at least the best token
    assert np.isfinite(kept).tolist() == [False, True, False, False]


def test_temperature_sharpens_and_must_be_positive():
    logits = np.array([1.0, 2.0])
    cold = np.exp(log_softmax(filtered_logits(logits, SamplingParams(temperature=0.1))))
    assert cold[1] > 0.99
    with pytest.raises(ValueError, match="temperature"):
        filtered_logits(logits, SamplingParams(temperature=0.0))


def test_repetition_penalty_makes_seen_tokens_less_likely_both_signs():
    logits = np.array([2.0, -1.0, 1.0])
    out = apply_repetition_penalty(logits, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -2.0, 1.0]
    assert logits.tolist() == [2.0, -1.0, 1.0]  # the input is not modified
    assert greedy_token(np.array([2.0, 1.5]), [0], repetition_penalty=2.0) == 1
    assert greedy_token(np.array([2.0, 1.5])) == 0


def test_greedy_picks_lowest_id_among_ties():
    assert greedy_token(np.array([1.0, 3.0, 3.0])) == 1


def test_log_softmax_rows_normalise():
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)
    lp = log_softmax(x)
    assert lp.dtype == np.float64
    assert np.allclose(np.exp(lp).sum(-1), 1.0)
