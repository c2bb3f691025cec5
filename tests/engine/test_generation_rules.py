"""A checkpoint's generation rules (service/engine/rules.py) read from bundle.json `generation`: an id of 0 is a rule,
as Marian's end token is 0, so a checkpoint whose only rule is `forced_eos_token_id: 0` still ends every row at its
length bound with it, as transformers' generate does."""

from __future__ import annotations

import numpy as np

from attnserve.service.engine.rules import GenerationRules


def test_a_forced_end_token_of_id_zero_is_a_rule_and_a_length_of_zero_is_none():
    rules = GenerationRules.of({"forced_eos_token_id": 0, "eos_token_id": 0}, vocab_size=5, start_id=4, eos_id=0)
    assert rules is not None and rules.forced_eos == 0
    assert GenerationRules.of({"forced_bos_token_id": 0}, vocab_size=5, start_id=4, eos_id=0).forced_bos == 0
    none = {"min_length": 0, "no_repeat_ngram_size": 0, "bad_words_ids": [], "forced_eos_token_id": None}
    assert GenerationRules.of(none, vocab_size=5, start_id=4, eos_id=0) is None


def test_the_forced_end_token_takes_the_last_step_the_length_allows():
    rules = GenerationRules.of({"forced_eos_token_id": 0}, vocab_size=5, start_id=4, eos_id=0)
    logits = np.log(np.full((2, 5), 0.2))
    out = rules.apply(logits.copy(), n_generated=np.array([2, 3]), limits=np.array([4, 4]), history=lambda: None)
    assert np.array_equal(out[0], logits[0])  # two more steps allowed: untouched
    assert out[1, 0] == 0.0 and np.isneginf(out[1, 1:]).all()  # the last: the end token alone
