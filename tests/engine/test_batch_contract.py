"""The batch contract (service/engine/contract.py): one batch implements it (SlotBatch), its v1 adapter steps the v1
graph over the same slots, the engine picks the step at load and drives either through the same calls, and over the
same weights they give the same answers.

The tiny bundle's fp32 weights are served both ways: its fp32 variant (v1, `kv_cache: "concat"`, ConcatSlotBatch)
and a float32 v2 decoder written from the same weights (`"in_place"`, SlotBatch; export/graphs/v2.py, what
`attnserve-export add-variant` checks as the fp16 variant's twin). Real ONNX Runtime sessions throughout.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from attnserve.service.engine.bundle import load_bundle, write_bundle_json
from attnserve.service.engine.concat import ConcatSlotBatch
from attnserve.service.engine.contract import DecodeBatch
from attnserve.service.engine.engine import BATCH_KINDS, DecodingOptions, Engine
from attnserve.service.engine.processors import log_softmax
from attnserve.service.engine.scheduler import ScoreTicket
from attnserve.service.engine.scoring import ForcedBatch
from attnserve.service.engine.slots import KEEP_WIDER, SlotBatch
from attnserve.service.engine.step import choose_tokens

WORDS = ["attention", "hello", "a", "phonetics", "zebra", "characteristically", "it", "onnx", "runtime", "cat"]
TWIN = "fp32-v2"  # the float32 v2 decoder of the tiny bundle's own weights


@pytest.fixture(scope="module")
def engines(tiny_bundle_dir, tmp_path_factory) -> dict[str, Engine]:
    """One engine per cache kind over the same float32 weights, keyed by kv_cache."""
    from attnserve.export.graphs.v2 import write_decoder_v2
    from attnserve.export.pipeline.v2 import V2_FALLBACK
    from attnserve.training.weights import load_bundle_weights

    out = tmp_path_factory.mktemp("contract") / "g2p-tiny"
    shutil.copytree(tiny_bundle_dir, out)
    config, state = load_bundle_weights(out)
    path = out / "decoder_v2_fp32_twin.onnx"
    write_decoder_v2(config, state, path)
    meta = json.loads((out / "bundle.json").read_text())
    meta["variants"][TWIN] = {
        "encoder": meta["variants"]["fp32"]["encoder"],
        "decoder": path.name,
        "kv_cache": "in_place",
        "fallback": V2_FALLBACK,
    }
    meta["files"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    write_bundle_json(out, meta)
    bundle = load_bundle(out)
    both = {"concat": Engine(bundle, variant="fp32", provider="cpu", threads=1)}
    both["in_place"] = Engine(bundle, variant=TWIN, provider="cpu", threads=1)
    return both


def test_each_kind_implements_the_contract_and_the_engine_picks_it_at_load(engines):
    assert BATCH_KINDS == {"concat": ConcatSlotBatch, "in_place": SlotBatch}
    for kv_cache, engine in engines.items():
        assert engine.kv_cache == kv_cache and engine.batch_kind is BATCH_KINDS[kv_cache]
        batch = engine.new_batch()
        assert isinstance(batch, DecodeBatch) and type(batch) is BATCH_KINDS[kv_cache] and len(batch) == 0
    written_once = ("remove", "feed")  # the contract's own, for both kinds
    assert not any(getattr(getattr(DecodeBatch, name), "__isabstractmethod__", False) for name in written_once)
    for kind in (ConcatSlotBatch, SlotBatch):
        assert not kind.__abstractmethods__
    # one decoder loop: the v1 adapter writes its step and how it loads, and inherits the rest (rows, joins,
    # compaction, the beam reorder)
    own = {name for name in vars(ConcatSlotBatch) if not name.startswith("_")}
    assert own == {"KV_CACHE", "DISABLED_OPTIMIZERS", "step_call", "load_error", "check_decoder", "run"}, own


def contract_decode(engine: Engine, words: list[str], options: DecodingOptions) -> dict[str, tuple[list[int], list[float]]]:
    """Decode `words` with the contract's calls only, a word joining every other step (different past and source
    lengths in one batch): {word: (token ids, raw log-probabilities)}."""
    batch = engine.new_batch()
    pending, gens, step = list(words), {}, 0
    while pending or len(batch):
        if pending and step % 2 == 0:
            w = pending.pop(0)
            (gen,), sources = engine.start([(engine.encode_text(w), options)])
            batch.add([gen], sources)
            gens[w] = gen
        logits, next_tokens = batch.run()
        choice = choose_tokens(batch.state, logits, next_tokens, engine.eos_id, engine.decode_ids)
        batch.follow(choice)
        batch.remove([r.generation for r in choice.results if r.finish_reason])
        step += 1
        assert step < 1000
    return {w: (list(g.token_ids), list(g.best.logprobs)) for w, g in gens.items()}


@pytest.mark.parametrize(
    "options",
    [
        DecodingOptions(max_new_tokens=48, logprobs=True),
        DecodingOptions(max_new_tokens=48, num_beams=4),
        DecodingOptions(max_new_tokens=48, temperature=0.8, seed=11, logprobs=True),
    ],
    ids=["greedy", "beam4", "seeded"],
)
def test_both_kinds_give_the_same_answers_through_the_same_calls(engines, options):
    """Greedy, beam 4 and seeded sampling: the same ids from either kind, and the same ids as decoding each word
    alone; log-probabilities within float32 rounding (the v2 graph fuses its projections)."""
    by_kind = {kind: contract_decode(engine, WORDS, options) for kind, engine in engines.items()}
    for w in WORDS:
        (ids_v1, lp_v1), (ids_v2, lp_v2) = by_kind["concat"][w], by_kind["in_place"][w]
        assert ids_v1 == ids_v2, w
        assert lp_v1 == pytest.approx(lp_v2, abs=1e-4), w
    for kind, engine in engines.items():
        alone = {w: r.token_ids for w, r in zip(WORDS, (engine.generate([w], options)[0] for w in WORDS))}
        assert {w: ids for w, (ids, _) in by_kind[kind].items()} == alone, kind


def test_both_kinds_score_given_tokens_alike(engines):
    """Teacher forcing through the contract (`ForcedBatch`: `run`, then `feed`): either kind gives each target the
    log-probabilities greedy generation gave its own answer, and the two kinds agree."""
    scored = {}
    for kind, engine in engines.items():
        answers = engine.generate(WORDS, DecodingOptions(max_new_tokens=48, logprobs=True))
        targets = [[r.token_ids, r.token_ids[:1]] for r in answers]
        tickets = [ScoreTicket(engine.encode_text(w), t, np.inf, None) for w, t in zip(WORDS, targets)]
        forced = ForcedBatch(engine)
        forced.add(tickets[:4])
        forced.step()
        forced.add(tickets[4:])  # joining a running batch
        while len(forced):
            forced.step()
        for t, r in zip(tickets, answers):
            greedy = t.scores[0]
            assert greedy.token_ids[:-1] == r.token_ids
            assert greedy.logprobs[:-1] == pytest.approx(r.logprobs, abs=1e-5)
        scored[kind] = [[s.logprobs for s in t.scores] for t in tickets]
    for v1, v2 in zip(scored["concat"], scored["in_place"]):
        for a, b in zip(v1, v2):
            assert a == pytest.approx(b, abs=1e-4)


def test_feed_gives_each_row_the_token_it_is_handed(engines):
    """`feed` by hand: a row fed a word's greedy answer token by token reads, at each step, the logits greedy
    decoding read there (whatever the kind)."""
    for engine in engines.values():
        (answer,) = engine.generate(["phonetics"], DecodingOptions(max_new_tokens=48, logprobs=True))
        batch = engine.new_batch()
        (gen,), sources = engine.start([(engine.encode_text("phonetics"), DecodingOptions(max_new_tokens=48))])
        batch.add([gen], sources)
        for k, token in enumerate(answer.token_ids):
            logits, _ = batch.run()
            assert float(log_softmax(logits)[0, token]) == pytest.approx(answer.logprobs[k], abs=1e-5)
            batch.state.advance(np.array([token]))
            batch.feed(np.array([token]), [] if k + 1 < len(answer.token_ids) else gen.rows)
        assert len(batch) == 0


def test_the_engine_lends_one_buffer_pool_and_no_batch_changes_the_engine(engines):
    """A batch that empties gives its buffers to the engine's pool (through the pool's calls), and the next
    batch takes them; decoding sets no engine attribute, whatever the kind."""
    for engine in engines.values():
        before = dict(vars(engine))
        pool = engine.buffer_pool
        engine.generate(WORDS[:3], DecodingOptions(max_new_tokens=8))
        assert vars(engine).keys() == before.keys() and all(vars(engine)[k] is v for k, v in before.items())
        assert len(pool) == 1
        batch = engine.new_batch()
        assert batch.pool is pool
        engine.join(batch, [(engine.encode_text("cat"), DecodingOptions(max_new_tokens=8))])
        assert len(pool) == 0  # the emptied batch's buffers, taken instead of allocated


def test_the_v1_adapter_keeps_its_buffers_on_the_host_whatever_the_device(engines):
    """On CUDA the v1 adapter's slots stay on the host (ONNX Runtime copies the fed past over and present back).
    No GPU here: the engine's decoder spec is relabelled "cuda" over its CPU session, the device being all the
    adapter reads of it; the batch must then allocate host arrays and answer as the engine does."""
    import dataclasses

    from attnserve.service.engine.contract import BufferPool

    engine = engines["concat"]
    batch = ConcatSlotBatch(dataclasses.replace(engine.decoder_spec, device="cuda"), BufferPool(), engine.run_decoder)
    options = DecodingOptions(max_new_tokens=48, num_beams=3)
    gens = engine.join(batch, [(engine.encode_text(w), options) for w in WORDS[:4]])
    while len(batch):
        choice = choose_tokens(batch.state, *batch.run(), engine.eos_id, engine.decode_ids)
        assert all(isinstance(buf, np.ndarray) for buf in batch.cache)
        batch.follow(choice)
        batch.remove([r.generation for r in choice.results if r.finish_reason])
    expected = engine.generate(WORDS[:4], options)
    assert [g.token_ids for g in gens] == [r.token_ids for r in expected]


def test_an_emptied_batch_keeps_its_binding_and_answers_as_a_new_one(engines):
    """A host batch whose last row left gives its cache to the pool and keeps the rest: rows that join it again at the
    same row count and source width take that cache back and step without rebinding, and so do rows whose source
    needs up to KEEP_WIDER keys less; a source narrower still narrows it (as a new batch would be); if another batch
    took its cache, it starts afresh. Every answer is a new batch's."""
    engine = engines["in_place"]
    options = DecodingOptions(max_new_tokens=12, logprobs=True)

    def answer(batch, word):
        (gen,) = engine.join(batch, [(engine.encode_text(word), options)])
        while len(batch):
            engine.step(batch)
        return gen.token_ids, gen.logprobs

    fresh = {w: answer(engine.new_batch(), w) for w in ("hello", "zebra", "characteristically", "abstractions", "a")}
    batch = engine.new_batch()
    binds = []
    bind = batch._bind
    batch._bind = lambda: binds.append(batch.n) or bind()  # counts the bindings, which are calls into ONNX Runtime
    assert answer(batch, "hello") == fresh["hello"]
    width = batch.width
    assert binds == [1] and len(engine.buffer_pool) == 1 and not batch.cache  # emptied: its cache went to the pool
    assert answer(batch, "zebra") == fresh["zebra"]  # the same width (5 letters, padded to 8)
    assert binds == [1] and batch.width == width  # stepped without binding again
    assert answer(batch, "characteristically") == fresh["characteristically"]
    assert batch.width == 20 and binds == [1, 1]  # wider: new buffers, bound again
    assert answer(batch, "abstractions") == fresh["abstractions"]  # 12 keys: within KEEP_WIDER of 20
    assert batch.width == 20 and binds == [1, 1] and batch.width - KEEP_WIDER <= 12
    assert answer(batch, "a") == fresh["a"]
    assert batch.width == 4  # narrowed again, as a new batch's
    other = engine.new_batch()
    engine.join(other, [(engine.encode_text("cat"), options)])  # takes the pooled cache
    assert len(engine.buffer_pool) == 0
    assert answer(batch, "hello") == fresh["hello"]  # a fresh start
    assert len(other) == 1
