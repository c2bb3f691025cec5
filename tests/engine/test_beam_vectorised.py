"""The vectorised beam step (service/engine/beam.py) against the per-search one it replaced
(tests/engine/beam_reference.py): the same parents, tokens, hypotheses and scores on random log-probabilities
full of ties, end tokens, filtered tokens, tiny vocabularies and stop sequences; beams placed so that as few rows
as can be take another row's cache; and whole beam decodes on the tiny bundle and the default model's int8
that give the same n-best lists, scores and texts as the reference."""

from __future__ import annotations

import itertools
from pathlib import Path

import beam_reference as reference
import numpy as np
import pytest

import attnserve.service.engine.beam as beam_module
import attnserve.service.engine.rows as rows_module
import attnserve.service.engine.step as step_module
from attnserve.service.engine.beam import BeamSearch, place_beams, update_searches
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.processors import log_softmax
from attnserve.service.engine.stopping import StoppingCriteria

EOS = 1  # within even the two-token vocabularies below
DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"
WORDS = ["attention", "hello", "a", "phonetics", "zebra", "characteristically", "it", "onnx", "runtime", "cat", "read", "lead"]


def decode(ids):
    return " ".join(f"t{i}" for i in ids)


def hypotheses(hyps):
    return [(h.token_ids, h.logprobs, h.finish_reason, h.eos_logprob, h.text, h.index, h.score) for h in hyps]


def random_step(rng, n, w, v, eos_share):
    """Log-probabilities [n, W, V] rounded so that many candidates tie, some tokens filtered, the end token
    often likely; and a raw distribution apart from the searched one."""
    logits = np.round(rng.normal(size=(n, w, v)) * 2, 1)
    logits[..., EOS] += rng.choice([-20.0, 0.0, 2.0], size=(n, w), p=[1 - eos_share, eos_share / 2, eos_share / 2])
    lp = log_softmax(logits)
    lp[rng.random((n, w, v)) < 0.1] = -np.inf
    return lp, lp - 0.25


@pytest.mark.parametrize(
    ("w", "v", "stop", "max_new"),
    [(4, 9, (), 7), (3, 7, (), 9), (1, 5, (), 6), (4, 3, (), 5), (2, 2, (), 4), (4, 8, ("t3 t4", "t5"), 8), (3, 2, ("t0",), 5)],
)
def test_the_vectorised_step_chooses_as_the_per_search_one(w, v, stop, max_new):
    """Searches of one width step together, some with stop sequences, some ending early; every step's parents
    and tokens, every search's end and its ranked hypotheses equal the per-search reference's, search by search."""
    rng = np.random.default_rng(w * 100 + v)
    n = 7
    for trial in range(4):
        stopping = [StoppingCriteria(max_new, stop if i % 2 else ()) for i in range(n)]
        new = [BeamSearch(w, w, EOS, s, decode) for s in stopping]
        old = [reference.BeamSearch(w, w, EOS, s, decode) for s in stopping]
        while True:
            live = [i for i in range(n) if not new[i].done]
            assert live == [i for i in range(n) if not old[i].done]
            if not live:
                break
            lp, raw = random_step(rng, len(live), w, v, eos_share=0.3 if trial else 0.05)
            p_new, t_new = update_searches([new[i] for i in live], lp, raw)
            p_old, t_old = reference.update_searches([old[i] for i in live], lp, raw)
            assert p_new.tolist() == p_old.tolist() and t_new.tolist() == t_old.tolist()
            for i in live:
                assert new[i].scores.tolist() == [b.score for b in old[i].beams]
                assert hypotheses(new[i].finished) == hypotheses(old[i].finished)
        for a, b in zip(new, old):
            assert hypotheses(a.finalize()) == hypotheses(b.finalize())


def test_a_search_chooses_the_same_alone_and_among_others():
    rng = np.random.default_rng(11)
    w, v, n = 4, 6, 9
    together = [BeamSearch(w, 2, EOS, StoppingCriteria(10), decode) for _ in range(n)]
    alone = [BeamSearch(w, 2, EOS, StoppingCriteria(10), decode) for _ in range(n)]
    while live := [i for i in range(n) if not together[i].done]:
        lp, raw = random_step(rng, len(live), w, v, eos_share=0.2)
        parents, tokens = update_searches([together[i] for i in live], lp, raw)
        for row, i in enumerate(live):
            p, t = update_searches([alone[i]], lp[row][None], raw[row][None])
            assert (p[0].tolist(), t[0].tolist()) == (parents[row].tolist(), tokens[row].tolist())
    assert [hypotheses(a.finalize()) for a in together] == [hypotheses(b.finalize()) for b in alone]


def test_beams_stay_in_their_parents_rows_and_only_extra_children_copy(monkeypatch):
    """Each new beam's row holds its parent's cache after the copies; a row copies only where a parent has more
    than one child (W minus the distinct parents per search); no row both gives and takes a cache. The Python
    placement of a few searches and the numpy one of many give the same rows and copies."""
    rng = np.random.default_rng(3)
    for w, n in itertools.product((1, 2, 3, 4, 6), (5, 50)):  # a few searches (placed in Python) and many (numpy)
        slots = rng.permutation(n * w).reshape(n, w)
        parents = rng.integers(0, w, size=(n, w))
        parents[: n // 5] = np.arange(w)  # some searches keep every beam where it is
        parents[n // 5 : n // 3] = rng.permuted(np.tile(np.arange(w), (n // 3 - n // 5, 1)), axis=1)  # a permutation
        new_slots, dest, src = place_beams(slots, parents)
        for few in (0, n):
            monkeypatch.setattr(beam_module, "FEW_SEARCHES", few)
            assert all(a.tolist() == b.tolist() for a, b in zip(place_beams(slots, parents), (new_slots, dest, src)))
        monkeypatch.undo()
        cache = np.arange(n * w) * 10  # each row's cache, by its contents
        parent_rows = slots[np.arange(n)[:, None], parents]
        assert not set(dest.tolist()) & set(src.tolist())
        cache[dest] = cache[src]
        assert (cache[new_slots] == parent_rows * 10).all()  # every beam reads its parent's cache
        for i in range(n):
            assert sorted(new_slots[i].tolist()) == sorted(slots[i].tolist())  # a search keeps its own rows
            assert np.isin(dest, slots[i]).sum() == w - len(set(parents[i].tolist()))
        assert not np.isin(dest, slots[: n // 3]).any()  # a permutation of parents moves no cache


@pytest.fixture(scope="module")
def engines(tiny_bundle_dir):
    return {
        "tiny int8": Engine(load_bundle(tiny_bundle_dir), variant="int8", provider="cpu", threads=1),
        "tiny fp32": Engine(load_bundle(tiny_bundle_dir), variant="fp32", provider="cpu", threads=1),
        "g2p-en int8": Engine(load_bundle(DEFAULT_BUNDLE), variant="int8", provider="cpu", threads=1),
    }


def reference_decoding(monkeypatch):
    """The engine's beam search through the per-search reference: its search class, step and row placement."""
    monkeypatch.setattr(rows_module, "BeamSearch", reference.BeamSearch)
    monkeypatch.setattr(step_module, "update_searches", reference.update_searches)
    monkeypatch.setattr(step_module, "place_beams", reference.place_beams)


BEAM_OPTIONS = [
    DecodingOptions(max_new_tokens=20, num_beams=4, best_of=4),
    DecodingOptions(max_new_tokens=12, num_beams=4, best_of=2, min_new_tokens=6),
    DecodingOptions(max_new_tokens=16, num_beams=3, best_of=3, repetition_penalty=1.3),
    DecodingOptions(max_new_tokens=20, num_beams=2, best_of=2, stop=["N"]),
    DecodingOptions(max_new_tokens=32, min_new_tokens=32, num_beams=4),  # the benchmark's forced length
]


@pytest.mark.parametrize("name", ["tiny int8", "tiny fp32", "g2p-en int8"])
def test_whole_beam_decodes_give_the_reference_n_best_lists(engines, name, monkeypatch):
    """Every word under every beam setting, batched together (mixed widths, searches ending at different steps):
    the same ranked hypotheses, log-probabilities, scores and texts as the per-search reference."""
    engine = engines[name]
    sources = [engine.encode_text(w) for w in WORDS]
    requests = [(s, o) for o in BEAM_OPTIONS for s in sources]
    ids, opts = [s for s, _ in requests], [o for _, o in requests]
    vectorised = engine.generate(ids, opts, batch_size=64)
    with monkeypatch.context() as m:
        reference_decoding(m)
        per_search = engine.generate(ids, opts, batch_size=64)
    for a, b in zip(vectorised, per_search):
        assert hypotheses(a.hypotheses) == hypotheses(b.hypotheses)
        assert a.finish_reason == b.finish_reason
