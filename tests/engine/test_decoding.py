"""The decoding module: processors, the shared sampler, beam search, stopping, seeding and ranking.

Driven on toy "models" (logits as a function of the prefix), so each rule is checked
against an independent computation without ONNX Runtime or torch."""

import dataclasses
import itertools

import beam_reference as reference
import numpy as np
import pytest

from attnserve.service.engine.beam import BeamSearch, update_searches
from attnserve.service.engine.options import DecodingOptions, InputError
from attnserve.service.engine.processors import greedy_tokens, log_softmax, process_logits, sample_rows
from attnserve.service.engine.rows import RowParams, RowState, new_generation
from attnserve.service.engine.step import choose_tokens
from attnserve.service.engine.stopping import Hypothesis, StoppingCriteria, rank

EOS = 1


def decode(ids):
    return " ".join(map(str, ids))


def params_for(*options: DecodingOptions) -> RowParams:
    p = RowParams(len(options))
    for i, o in enumerate(options):
        p.set_row(i, o)
    return p


def processed(logits, options: DecodingOptions, counts=None, n_generated=0):
    x = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    c = None if counts is None else np.atleast_2d(np.asarray(counts, dtype=np.int32))
    return process_logits(x, params_for(options), c, np.array([n_generated]), EOS)[0]


def run(options: list[DecodingOptions], logits_of, vocab: int, bound=None):
    """Decode with choose_tokens as a decode loop does; logits_of(prefix) -> [V]."""
    gens = [new_generation([5], o, bound, EOS, decode) for o in options]
    rows = [r for g in gens for r in g.rows]
    state = RowState(vocab)
    state.take(np.zeros(0, dtype=np.int64), rows)
    prefixes = [[] for _ in rows]
    for _ in range(100):
        if not state.active.any():
            break
        logits = np.stack([logits_of(p) for p in prefixes])
        choice = choose_tokens(state, logits, None, EOS, decode)
        if choice.reorder is not None:
            dest, src = choice.reorder
            moved = [list(prefixes[s]) for s in src]
            for d, m in zip(dest, moved):
                prefixes[d] = m
        prefixes = [p + [int(t)] for p, t in zip(prefixes, choice.tokens)]
        for row in choice.leaving:
            state.free(row)
    return gens


def toy_model(vocab: int, seed: int = 0):
    """Deterministic logits for every prefix (a hash of the prefix seeds them)."""

    def logits_of(prefix):
        rng = np.random.default_rng([seed, len(prefix), *prefix])
        return rng.normal(scale=2.0, size=vocab)

    return logits_of


class CountingRng:
    """Wraps a Generator and counts the uniforms drawn."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    def random(self):
        self.calls += 1
        return self.rng.random()


# ---- options ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"best_of": 0}, "best_of"),
        ({"num_beams": 0}, "num_beams"),
        ({"num_beams": 3, "do_sample": True}, "num_beams"),
        ({"typical_p": 0.0}, "typical_p"),
        ({"frequency_penalty": 3.0}, "frequency_penalty"),
        ({"top_n_tokens": -1}, "top_n_tokens"),
        ({"temperature": 0.0}, "temperature"),
        ({"min_new_tokens": 5, "max_new_tokens": 2}, "min_new_tokens"),
    ],
)
def test_bad_options_are_refused_with_the_parameter_named(kwargs, message):
    with pytest.raises(InputError, match=message):
        DecodingOptions(**kwargs)


def test_rows_and_search_follow_tgi_semantics():
    assert DecodingOptions().n_rows == 1 and DecodingOptions().streams
    beams = DecodingOptions(best_of=3)
    assert beams.beam_search and beams.n_rows == 3 and not beams.streams
    assert DecodingOptions(best_of=2, num_beams=5).n_rows == 5
    sampled = DecodingOptions(best_of=3, do_sample=True)
    assert not sampled.beam_search and sampled.n_rows == 3
    assert DecodingOptions(typical_p=0.5).sampling  # TGI: typical_p < 1 turns sampling on


# ---- processors ---------------------------------------------------------------------------------
def test_top_k_keeps_only_the_k_best_ties_towards_lower_id():
    kept = processed([0.0, 5.0, 1.0, 4.0, 3.0], DecodingOptions(top_k=2))
    assert np.isfinite(kept).tolist() == [False, True, False, True, False]
    kept = processed([1.0, 2.0, 2.0, 2.0], DecodingOptions(top_k=2))
    assert np.isfinite(kept).tolist() == [False, True, True, False]


def test_top_p_keeps_smallest_set_reaching_p():
    probs = np.log([0.05, 0.5, 0.3, 0.15])
    assert np.isfinite(processed(probs, DecodingOptions(top_p=0.7))).tolist() == [False, True, True, False]
    assert np.isfinite(processed(probs, DecodingOptions(top_p=0.01))).tolist() == [False, True, False, False]


def test_typical_p_matches_the_reference_definition():
    """Against a direct transcription of Hugging Face's TypicalLogitsWarper."""
    rng = np.random.default_rng(3)
    for mass in (0.2, 0.5, 0.9):
        x = rng.normal(size=12)
        logp = x - np.log(np.exp(x).sum())
        p = np.exp(logp)
        ent = -(logp * p).sum()
        order = np.argsort(np.abs(-logp - ent), kind="stable")
        cum = np.cumsum(p[order])
        last = min(int((cum < mass).sum()), len(x) - 1)
        expected = np.zeros(len(x), dtype=bool)
        expected[order[: last + 1]] = True
        got = np.isfinite(processed(x, DecodingOptions(typical_p=mass)))
        assert got.tolist() == expected.tolist()


def test_temperature_sharpens():
    cold = np.exp(log_softmax(processed([1.0, 2.0], DecodingOptions(temperature=0.1))))
    assert cold[1] > 0.99


def test_repetition_penalty_makes_seen_tokens_less_likely_both_signs():
    out = processed([2.0, -1.0, 1.0], DecodingOptions(repetition_penalty=2.0), counts=[1, 2, 0])
    assert out.tolist() == [1.0, -2.0, 1.0]


def test_frequency_penalty_subtracts_per_occurrence():
    out = processed([2.0, 2.0, 2.0], DecodingOptions(frequency_penalty=0.5), counts=[0, 1, 3])
    assert out.tolist() == [2.0, 1.5, 0.5]


def test_end_token_is_suppressed_before_min_new_tokens():
    opts = DecodingOptions(min_new_tokens=2, max_new_tokens=5)
    assert processed([0.0, 9.0, 1.0], opts, n_generated=1)[EOS] == -np.inf
    assert processed([0.0, 9.0, 1.0], opts, n_generated=2)[EOS] == 9.0


def test_rows_with_different_settings_share_one_call_and_match_each_alone():
    rng = np.random.default_rng(0)
    options = [
        DecodingOptions(),
        DecodingOptions(top_k=3, temperature=0.7),
        DecodingOptions(top_p=0.6),
        DecodingOptions(typical_p=0.4),
        DecodingOptions(repetition_penalty=1.3, frequency_penalty=0.2),
        DecodingOptions(min_new_tokens=4, max_new_tokens=8, top_k=5),
    ]
    x = rng.normal(size=(len(options), 9))
    counts = rng.integers(0, 3, size=(len(options), 9)).astype(np.int32)
    n = np.array([0, 1, 2, 3, 4, 1])
    together = process_logits(x, params_for(*options), counts, n, EOS)
    for i, o in enumerate(options):
        alone = process_logits(x[i : i + 1], params_for(o), counts[i : i + 1], n[i : i + 1], EOS)[0]
        assert together[i].tolist() == alone.tolist()


# ---- token choice -------------------------------------------------------------------------------
def test_greedy_picks_lowest_id_among_ties():
    assert greedy_tokens(np.array([[1.0, 3.0, 3.0], [5.0, 0.0, 5.0]])).tolist() == [1, 0]


def test_inverse_cdf_matches_manual_computation_and_frequencies_follow_the_distribution():
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    u = np.random.default_rng(7).random()
    expected = int(np.searchsorted(np.cumsum(probs), u, side="right"))
    assert sample_rows(np.log(probs)[None, :], np.array([u])).tolist() == [expected]
    uniforms = np.random.default_rng(123).random(20000)
    draws = sample_rows(np.tile(np.log([0.5, 0.3, 0.15, 0.05]), (20000, 1)), uniforms)
    assert np.allclose(np.bincount(draws, minlength=4) / 20000, [0.5, 0.3, 0.15, 0.05], atol=0.015)


def test_filtered_tokens_are_never_sampled():
    x = np.tile(np.array([0.0, 5.0, 1.0, 4.0, 3.0]), (500, 1))
    kept = process_logits(x, params_for(*[DecodingOptions(top_k=2)] * 500), None, np.zeros(500, int), EOS)
    assert set(sample_rows(kept, np.random.default_rng(0).random(500)).tolist()) == {1, 3}


def test_each_sampled_row_draws_exactly_one_uniform_per_step():
    model = toy_model(6)
    gens = [new_generation([5], DecodingOptions(do_sample=True, seed=s, max_new_tokens=6), None, EOS, decode) for s in (1, 2)]
    greedy = new_generation([5], DecodingOptions(max_new_tokens=6), None, EOS, decode)
    rows = [gens[0].rows[0], greedy.rows[0], gens[1].rows[0]]
    counters = [CountingRng(1), CountingRng(2)]
    rows[0].rng, rows[2].rng = counters
    state = RowState(6)
    state.take(np.zeros(0, dtype=np.int64), rows)
    steps = 0
    while state.active[[0, 2]].any() and steps < 6:
        before = [c.calls for c in counters]
        alive = [rows[0].slot >= 0, rows[2].slot >= 0]
        choice = choose_tokens(state, np.stack([model([steps])] * 3), None, EOS, decode)
        assert [c.calls - b for c, b in zip(counters, before)] == [int(a) for a in alive]
        for row in choice.leaving:
            state.free(row)
        steps += 1


def test_seeded_sampling_is_reproducible_and_candidates_differ():
    model = toy_model(8, seed=4)
    one = run([DecodingOptions(do_sample=True, seed=9, max_new_tokens=10)], model, 8)[0]
    again = run([DecodingOptions(), DecodingOptions(do_sample=True, seed=9, max_new_tokens=10)], model, 8)[1]
    assert one.token_ids == again.token_ids and one.seed == 9
    best_of = run([DecodingOptions(do_sample=True, seed=9, best_of=4, max_new_tokens=10)], model, 8)[0]
    assert len(best_of.hypotheses) == 4
    assert len({tuple(h.token_ids) for h in best_of.hypotheses}) > 1
    assert [h.score for h in best_of.hypotheses] == sorted((h.score for h in best_of.hypotheses), reverse=True)


def test_top_tokens_are_the_most_likely_with_raw_logprobs():
    model = toy_model(7)
    (gen,) = [new_generation([5], DecodingOptions(top_n_tokens=3, max_new_tokens=2), None, EOS, decode)]
    state = RowState(7)
    state.take(np.zeros(0, dtype=np.int64), gen.rows)
    logits = model([])[None, :]
    (result,) = choose_tokens(state, logits, None, EOS, decode).results
    lp = log_softmax(logits[0])
    assert [i for i, _ in result.top_tokens] == np.argsort(-lp, kind="stable")[:3].tolist()
    assert np.allclose([v for _, v in result.top_tokens], np.sort(lp)[::-1][:3])


def test_min_new_tokens_counts_from_each_rows_own_join_on_the_in_graph_argmax():
    """Rows join a running batch at different steps, the loop giving an in-graph argmax that is always the end
    token: each row still makes exactly its own min_new_tokens before ending (counted from its join, not the batch's)."""
    vocab = 5
    wants_eos = np.zeros(vocab)
    wants_eos[EOS] = 5.0
    wants_eos[3] = 1.0  # the best token but the end token
    state = RowState(vocab)
    fillers = [new_generation([5], DecodingOptions(), None, EOS, decode).rows[0] for _ in range(3)]
    state.take(np.zeros(0, dtype=np.int64), fillers)
    for row in fillers:  # three free slots
        state.free(row)
    gens, joins = [], {0: (0, 4), 2: (1, 3), 3: (2, 1)}  # step -> (slot, min_new_tokens)
    for step in range(12):
        if step in joins:
            slot, n = joins[step]
            gens.append(new_generation([5], DecodingOptions(max_new_tokens=8, min_new_tokens=n), None, EOS, decode))
            state.put(slot, gens[-1].rows[0])
        if not state.active.any():
            continue
        logits = np.stack([wants_eos] * len(state))
        choice = choose_tokens(state, logits, greedy_tokens(logits), EOS, decode)
        for row in choice.leaving:
            state.free(row)
    assert [g.token_ids for g in gens] == [[3] * 4, [3] * 3, [3]]
    assert all(g.finish_reason == "eos_token" for g in gens)


def test_a_lone_row_held_from_the_end_token_leaves_the_step_s_logits_as_they_were():
    """One row before its min_new_tokens whose argmax is the end token takes its best other token, as rows held back
    together do; the step's logits (the decoder's output buffer, which other rows' processing reads) are put back
    as they were, and read-only logits work too."""
    logits = np.array([[0.5, 1.0, 0.25, 2.0, 1.5]], dtype=np.float32)
    logits[0, EOS] = 9.0
    for writeable in (True, False):
        gen = new_generation([5], DecodingOptions(max_new_tokens=4, min_new_tokens=2), None, EOS, decode)
        state = RowState(5)
        state.take(np.zeros(0, dtype=np.int64), gen.rows)
        given = logits.copy()
        given.flags.writeable = writeable
        choice = choose_tokens(state, given, greedy_tokens(given), EOS, decode)
        assert choice.tokens.tolist() == [3] and gen.rows[0].token_ids == [3] and not choice.leaving
        assert np.array_equal(given, logits)


def test_a_whole_answer_decodes_its_text_once_and_a_streamed_one_every_token():
    model = toy_model(9, seed=3)
    calls = []

    def counting_decode(ids):
        calls.append(list(ids))
        return decode(ids)

    answers = {}
    for token_text in (True, False):
        calls.clear()
        gen = new_generation([5], DecodingOptions(max_new_tokens=6, token_text=token_text), None, EOS, counting_decode)
        state = RowState(9)
        state.take(np.zeros(0, dtype=np.int64), gen.rows)
        prefix, deltas = [], []
        while state.active.any():
            choice = choose_tokens(state, model(prefix)[None, :], None, EOS, counting_decode)
            deltas += [r.text for r in choice.results]
            prefix += choice.tokens.tolist()
            for row in choice.leaving:
                state.free(row)
        answers[token_text] = (gen.token_ids, gen.text)
        n = len(gen.token_ids)
        assert n > 1
        if token_text:  # each token's delta: together they are the answer
            assert len(calls) == n and "".join(deltas) == gen.text
        else:  # one decode, at the end
            assert calls == [gen.token_ids] and not "".join(deltas)
    assert answers[True] == answers[False]


# ---- beam search and ranking --------------------------------------------------------------------
def test_ranking_is_the_mean_raw_logprob_with_the_end_token():
    a = Hypothesis([3, 4], [-0.1, -0.1], "eos_token", eos_logprob=-1.0)  # mean -0.4
    b = Hypothesis([3], [-0.5], "eos_token", eos_logprob=-0.2)  # mean -0.35
    assert rank([a, b]) == [b, a]
    assert a.score == pytest.approx(-0.4) and a.generated_tokens == 3


def test_beam_width_one_equals_greedy_exactly():
    for seed in range(5):
        model = toy_model(6, seed)
        greedy = run([DecodingOptions(max_new_tokens=8)], model, 6)[0]
        beam = run([DecodingOptions(max_new_tokens=8, num_beams=1)], model, 6)[0]
        assert beam.token_ids == greedy.token_ids and beam.finish_reason == greedy.finish_reason


def test_wide_beam_finds_the_best_sequence_by_exhaustive_search():
    """With a beam as wide as the whole tree, every sequence is a hypothesis: the top of the ranking
    is the exhaustive optimum of the mean raw log-probability."""
    vocab, max_len = 3, 4  # tokens 0 and 2, end token 1
    for seed in range(4):
        model = toy_model(vocab, seed)
        best, best_score = None, -np.inf
        for n in range(max_len + 1):
            for body in itertools.product([0, 2], repeat=n):
                lps, prefix = [], []
                for t in body:
                    lps.append(log_softmax(model(prefix))[t])
                    prefix.append(t)
                if n < max_len:
                    lps.append(log_softmax(model(prefix))[EOS])
                score = float(np.mean(lps)) if lps else -np.inf
                if score > best_score:
                    best, best_score = list(body), score
        gen = run([DecodingOptions(max_new_tokens=max_len, best_of=2, num_beams=64)], model, vocab)[0]
        assert gen.hypotheses[0].token_ids == best
        assert gen.hypotheses[0].score == pytest.approx(best_score, abs=1e-12)
        scores = [h.score for h in gen.hypotheses]
        assert len(scores) == 2 and scores == sorted(scores, reverse=True)


def test_beams_in_one_batch_with_other_rows_match_each_alone():
    model = toy_model(9, seed=2)
    options = [
        DecodingOptions(max_new_tokens=7, best_of=3),
        DecodingOptions(max_new_tokens=7),
        DecodingOptions(max_new_tokens=7, do_sample=True, seed=3, best_of=2),
        DecodingOptions(max_new_tokens=7, num_beams=4, best_of=2, repetition_penalty=1.2),
    ]
    together = run(options, model, 9)
    for o, g in zip(options, together):
        alone = run([o], model, 9)[0]
        assert [h.token_ids for h in g.hypotheses] == [h.token_ids for h in alone.hypotheses]
        assert [h.score for h in g.hypotheses] == [h.score for h in alone.hypotheses]


def test_beams_before_min_new_tokens_never_end_and_match_each_alone():
    """min_new_tokens bars the end token from every beam until the minimum. Several searches in one batch,
    each with its own minimum, rank exactly as they do alone (the barred distribution is computed once
    for the whole batch, row by row)."""
    model = toy_model(9, seed=3)  # unforced, its beams end at 2-3 tokens
    options = [
        DecodingOptions(max_new_tokens=8, num_beams=3, best_of=3, min_new_tokens=5),
        DecodingOptions(max_new_tokens=8, num_beams=4, best_of=2, min_new_tokens=2),
        DecodingOptions(max_new_tokens=8, num_beams=2),
        DecodingOptions(max_new_tokens=8),
    ]
    unforced = run([dataclasses.replace(options[0], min_new_tokens=0)], model, 9)[0]
    assert min(len(h.token_ids) for h in unforced.hypotheses) < 5  # so the minimum has work to do
    together = run(options, model, 9)
    for o, g in zip(options, together):
        alone = run([o], model, 9)[0]
        assert [h.token_ids for h in g.hypotheses] == [h.token_ids for h in alone.hypotheses]
        assert [h.score for h in g.hypotheses] == [h.score for h in alone.hypotheses]
        assert all(len(h.token_ids) >= o.min_new_tokens for h in g.hypotheses)


def test_beam_search_stops_at_the_length_limit_with_reason_length():
    search = BeamSearch(2, 2, EOS, StoppingCriteria(max_new_tokens=3), decode)
    lp = log_softmax(np.tile([0.0, -50.0, 1.0], (2, 1)))  # the end token is never worth it
    for _ in range(3):
        update_searches([search], lp[None], lp[None])
    assert search.done
    assert {h.finish_reason for h in search.finalize()} == {"length"}


def test_searches_choosing_together_choose_as_each_alone_and_as_a_full_sort():
    """update_searches picks every search's candidates in one numpy pass: each search must get what it gets
    alone, and what a plain sort of all its W * V candidates by (score, then lower beam and token) gives."""
    rng = np.random.default_rng(5)
    w, v, n = 3, 7, 6

    def searches(kind=BeamSearch):
        return [kind(w, w, EOS, StoppingCriteria(max_new_tokens=6), decode) for _ in range(n)]

    together, alone, by_sort = searches(), searches(), searches(reference.BeamSearch)  # the per-search scan, fed a full sort
    for _ in range(6):
        # logits rounded to one decimal: many candidates tie, which is where orders can differ
        lp = log_softmax(np.round(rng.normal(size=(n, w, v)) * 2, 1))
        lp[rng.random((n, w, v)) < 0.1] = -np.inf  # filtered tokens never become candidates
        raw = lp - 0.25  # a raw distribution apart from the searched one: each hypothesis keeps the raw one
        live = [i for i in range(n) if not together[i].done]
        parents, tokens = update_searches([together[i] for i in live], lp[live], raw[live])
        for row, i in enumerate(live):
            p_alone, t_alone = (a[0] for a in update_searches([alone[i]], lp[i][None], raw[i][None]))
            assert parents[row].tolist() == p_alone.tolist() and tokens[row].tolist() == t_alone.tolist()
            s = by_sort[i]
            scores = (np.array([b.score for b in s.beams])[:, None] + lp[i]).ravel()
            order = sorted(range(w * v), key=lambda j: (-scores[j], j))[: 2 * w + 1]
            p_sort, t_sort = s._advance(order, [float(scores[j]) for j in order], [float(raw[i].ravel()[j]) for j in order], v)
            assert (p_sort, t_sort) == (p_alone.tolist(), t_alone.tolist())
    for a, b, c in zip(together, alone, by_sort):
        assert a.done == b.done == c.done
        assert [(h.token_ids, h.logprobs, h.finish_reason) for h in a.finalize()] == [
            (h.token_ids, h.logprobs, h.finish_reason) for h in b.finalize()
        ]
        assert [h.token_ids for h in a.finalize()] == [h.token_ids for h in c.finalize()]


def test_stopping_criteria_stop_sequence_then_length():
    stop = StoppingCriteria(max_new_tokens=3, stop=("B C",))
    assert stop(1, "A", "A B") == (False, None)
    assert stop(2, "A B", "A B C") == (True, "stop_sequence")
    assert stop(3, "x", "x y") == (True, "length")


def test_length_bound_caps_max_new_tokens_unless_min_new_tokens_lifts_it():
    model = toy_model(6, seed=1)

    def no_eos(prefix):
        x = model(prefix)
        x[EOS] = -50.0
        return x

    (gen,) = run([DecodingOptions(max_new_tokens=20)], no_eos, 6, bound=4)
    assert len(gen.token_ids) == 4 and gen.finish_reason == "length"
    (gen,) = run([DecodingOptions(max_new_tokens=2)], no_eos, 6, bound=4)
    assert len(gen.token_ids) == 2
    (gen,) = run([DecodingOptions(max_new_tokens=10, min_new_tokens=10)], no_eos, 6, bound=4)
    assert len(gen.token_ids) == 10


def test_log_softmax_rows_normalise():
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)
    lp = log_softmax(x)
    assert lp.dtype == np.float64
    assert np.allclose(np.exp(lp).sum(-1), 1.0)


def test_a_hypothesis_score_is_numpys_mean_of_its_logprobs_and_end_token():
    import random

    from attnserve.service.engine.stopping import Hypothesis

    rng = random.Random(0)
    for _ in range(5000):
        logprobs = [rng.uniform(-20, 0) * rng.choice([1e-3, 1, 1e3]) for _ in range(rng.randint(0, 40))]
        eos = rng.choice([None, rng.uniform(-5, 0)])
        every = logprobs + ([eos] if eos is not None else [])
        expected = float(np.mean(every)) if every else 0.0
        assert Hypothesis([7] * len(logprobs), logprobs, "eos_token", eos).score == expected
