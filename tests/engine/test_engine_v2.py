"""The engine over a v2 decoder (kv_cache "in_place", service/engine/slots.py): rows in slots of the batch's
buffers, the same answers alone and in any batch, and the start-up rules (fallback, missing kernels, missing inputs)."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil

import numpy as np
import onnx
import pytest

from attnserve.service.engine.bundle import BundleError, load_bundle, write_bundle_json
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.slots import SlotBatch

WORDS = ["attention", "hello", "a", "phonetics", "zebra", "characteristically", "it", "onnx", "runtime", "cat"]


@pytest.fixture(scope="module")
def v2(tiny_bundle_dir):
    """The tiny bundle's int8 variant, which `attnserve-export build` writes as a v2 decoder."""
    return Engine(load_bundle(tiny_bundle_dir), variant="int8", provider="cpu", threads=1)


def greedy(n=48):
    return DecodingOptions(max_new_tokens=n)


def rewrite(bundle_dir, **fields):
    meta_path = bundle_dir / "bundle.json"
    meta = json.loads(meta_path.read_text())
    meta.update(fields)
    write_bundle_json(meta_path.parent, meta)
    return meta


def test_the_built_int8_variant_is_v2_and_fp32_stays_v1(tiny_bundle_dir, v2):
    bundle = load_bundle(tiny_bundle_dir)
    assert bundle.meta["format_version"] == 2
    assert bundle.kv_cache("int8") == "in_place" and bundle.kv_cache("fp32") == "concat"
    assert bundle.fallback("int8") == "fp32"
    names = [i["name"] for i in bundle.meta["io"]["decoder_v2"]["inputs"]]
    assert names[:5] == ["input_ids", "position_ids", "past_lengths", "total_sequence_length", "encoder_attention_bias"]
    assert v2.kv_cache == "in_place" and isinstance(v2.new_batch(), SlotBatch)
    cfg = bundle.config
    assert v2.kv_cache_bytes_per_row == 2 * cfg["n_decoder_layers"] * cfg["d_model"] * bundle.max_target_len * 4


def test_rows_in_slots_give_the_same_ids_alone_and_in_continuous_batches(v2, tiny_bundle_dir):
    """Greedy, seeded sampling and beam 4, one request at a time against continuous batches that mix them."""
    from attnserve.export.checks.variant_parity import v2_parity

    corpus = json.loads((tiny_bundle_dir / "parity_corpus.json").read_text())
    corpus = {**corpus, "source_ids": corpus["source_ids"][:60], "greedy": corpus["greedy"][:60]}
    report = v2_parity(v2, corpus, exact=False)
    assert report["failures"] == []
    assert report["greedy_alone_vs_continuous_batching_differ"] == 0
    assert report["sampling_alone_vs_continuous_batching_differ"] == 0
    assert report["beam_alone_vs_continuous_batching_differ"] == 0


def test_joining_writes_a_slot_and_finishing_frees_it(v2):
    """A joining row takes the lowest free slot; the step runs on slots up to the highest live one; each row
    has its own past length; the cache buffers are the same objects throughout (nothing rebuilt)."""
    forced = DecodingOptions(max_new_tokens=20, min_new_tokens=20)
    alone = {w: v2.generate([w], forced)[0].token_ids for w in WORDS[:5]}
    batch = v2.new_batch()
    gens = dict(zip(WORDS[:5], v2.join(batch, [(v2.encode_text(w), forced) for w in WORDS[:5]])))
    buffers = list(batch.past)
    v2.step(batch)
    v2.step(batch)
    assert batch.n == 5 and batch.positions[:5, 0].tolist() == [2] * 5
    batch.remove([gens.pop("hello")])  # slot 1 free
    assert len(batch) == 4 and batch.n == 5 and batch.positions[1, 0] == 0
    (late,) = v2.join(batch, [(v2.encode_text("cat"), forced)])
    assert late.rows[0].slot == 1 and batch.positions[1, 0] == 0 and batch.n == 5
    v2.step(batch)
    assert batch.positions[:5, 0].tolist() == [3, 1, 3, 3, 3]  # each row its own past length
    batch.remove([gens.pop("zebra")])  # the highest slot leaves: the step shrinks to the live ones
    assert batch.n == 4
    assert all(a is b for a, b in zip(batch.past, buffers))  # no row's cache was copied or rebuilt
    while len(batch):
        batch.remove([r.generation for r in v2.step(batch) if r.finish_reason])
    for w, g in gens.items():
        assert g.token_ids == alone[w], w
    assert len(late.token_ids) == 20


def test_a_step_with_half_its_slots_free_runs_on_the_live_rows_only(v2):
    """Rows leaving from the middle with nobody joining: a slot or two stay free (a compaction would cost the step
    more than they do), but before a step that would run on half or more of free slots the highest rows move down
    into them, so it runs on the live rows only; moved rows (greedy, seeded sampling, and beam 4, whose beams then
    move again among their rows) give what they give alone."""
    forced = DecodingOptions(max_new_tokens=12, min_new_tokens=12)
    sampled = DecodingOptions(max_new_tokens=12, min_new_tokens=12, temperature=0.9, seed=7)
    beams = DecodingOptions(max_new_tokens=12, num_beams=4)
    plan = [("attention", forced), ("hello", forced), ("zebra", sampled), ("characteristically", beams), ("phonetics", forced)]
    plan += [("runtime", sampled), ("cat", forced), ("onnx", sampled)]
    alone = [v2.generate([w], o)[0] for w, o in plan]
    batch = v2.new_batch()
    ran_on = []  # the rows each decoder call ran on, and whether every one of them was live
    run_binding = batch.run_binding

    def counting(binding, options):
        ran_on.append((batch.n, all(q is not None and q.slot == i for i, q in enumerate(batch.rows))))
        return run_binding(binding, options)

    batch.run_binding = counting
    gens = v2.join(batch, [(v2.encode_text(w), o) for w, o in plan])
    for _ in range(3):
        v2.step(batch)
    assert batch.n == len(batch) == 11  # 7 single rows and 4 beams (slots 3-6)
    batch.remove([gens[1]])  # slot 1
    v2.step(batch)
    assert ran_on[-1] == (11, False)  # one free slot of eleven computes
    leaving = [gens[1], gens[0], gens[2], gens[4], gens[5], gens[6]]  # slots 0, 2, 7, 8 and 9 too
    batch.remove(leaving[1:])
    assert len(batch) == 5 and batch.n == 11
    v2.step(batch)
    assert ran_on[-1] == (5, True)  # two beams (slots 5, 6) and "onnx" (slot 10) moved into slots 0-2
    while len(batch):
        batch.remove([r.generation for r in v2.step(batch) if r.finish_reason])
    for (w, _), gen, ref in zip(plan, gens, alone):
        if gen not in leaving:
            assert gen.token_ids == ref.token_ids, w
            assert [h.token_ids for h in gen.hypotheses] == [h.token_ids for h in ref.hypotheses], w


def test_a_slot_a_shorter_source_takes_holds_zeros_past_it_even_after_rows_moved(v2):
    """A joining row writes its source's cross K/V and clears only what a longer source left in its slot (`written`):
    whatever the slots' history (longer and shorter sources, compaction moving rows down, the buffers growing), every
    live row's keys past its source are zeros, and its answer is its answer alone."""
    forced = DecodingOptions(max_new_tokens=6, min_new_tokens=6)
    batch = v2.new_batch()

    def check(gens):
        for g in gens:
            for q in g.rows:
                s = len(g.source_ids)
                assert batch.written[q.slot] == s
                assert all(not c[q.slot, :, s:].any() for c in batch.cross), g.source_ids
                assert all(c[q.slot, :, :s].any() for c in batch.cross)

    long_words = ["characteristically", "phonetics", "attention", "runtime"]
    first = v2.join(batch, [(v2.encode_text(w), forced) for w in long_words])
    v2.step(batch)
    batch.remove(first[:3])  # slots 0-2 keep the long sources' keys
    short = v2.join(batch, [(v2.encode_text(w), forced) for w in ["a", "it"]])  # slots 0 and 1
    assert [g.rows[0].slot for g in short] == [0, 1]
    check([*short, first[3]])
    batch.remove([short[0]])  # slot 0 free, slot 2 free: half of four slots
    v2.step(batch)  # compaction: "runtime" moves down from slot 3 into slot 0
    assert batch.n == 2 and first[3].rows[0].slot == 0
    check([short[1], first[3]])
    more = v2.join(batch, [(v2.encode_text(w), forced) for w in ["cat", "hello", "zebra", "onnx", "a", "it"]])  # grows
    check([short[1], first[3], *more])
    gens = [short[1], first[3], *more]
    while len(batch):
        batch.remove([r.generation for r in v2.step(batch) if r.finish_reason])
    for g in gens:
        assert g.token_ids == v2.generate([g.source_ids], forced)[0].token_ids


def test_greedy_and_sampled_rows_never_copy_their_cache_and_beams_copy_only_moved_rows(v2, monkeypatch):
    copies = []
    original = SlotBatch.reorder

    def counting(self, dest, src):
        assert len(dest) == len(src) and bool(np.all(dest != src))
        copies.append(len(dest))
        return original(self, dest, src)

    monkeypatch.setattr(SlotBatch, "reorder", counting)
    sampled = DecodingOptions(max_new_tokens=20, temperature=0.9, seed=3)
    v2.generate(WORDS, [greedy(), sampled] * 5, batch_size=32)
    assert copies == []
    v2.generate(WORDS[:4], DecodingOptions(max_new_tokens=20, num_beams=4), batch_size=16)
    assert copies and max(copies) < 16  # per step, only the rows whose parent changed


def test_cross_keys_are_padded_to_a_multiple_of_four(v2):
    batch = v2.new_batch()
    v2.join(batch, [(v2.encode_text("a"), greedy())])
    assert batch.width == 4
    v2.join(batch, [(v2.encode_text("characteristically"), greedy())])
    assert batch.width == 20 and batch.bias[0, 0, 0, 1:].max() == -1e9  # "a": one real key, the rest masked


def _break_v2_decoder(bundle_dir, edit) -> None:
    """Edit the v2 int8 decoder's graph in place and re-record its hash (a bundle a runtime cannot run)."""
    meta = json.loads((bundle_dir / "bundle.json").read_text())
    path = bundle_dir / meta["variants"]["int8"]["decoder"]
    m = onnx.load(str(path))
    edit(m)
    onnx.save(m, str(path))
    meta["files"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    write_bundle_json(bundle_dir, meta)


@pytest.fixture
def no_kernel_bundle(tiny_bundle_dir, tmp_path):
    """The tiny bundle serving int8 by default, its v2 decoder asking for an operator this runtime has no kernel
    for (what an onnxruntime without GroupQueryAttention sees)."""
    out = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, out)
    meta = json.loads((out / "bundle.json").read_text())
    rewrite(out, default_variant={**meta["default_variant"], "cpu": "int8"})

    def rename(m):
        for node in m.graph.node:
            if node.op_type == "GroupQueryAttention":
                node.op_type = "GroupQueryAttentionV99"

    _break_v2_decoder(out, rename)
    return out


def test_auto_falls_back_to_v1_with_one_warning_line(no_kernel_bundle, caplog):
    with caplog.at_level(logging.WARNING, logger="attnserve.engine"):
        engine = Engine(load_bundle(no_kernel_bundle), variant="auto", provider="cpu", threads=1)
    assert engine.variant == "fp32" and engine.kv_cache == "concat"
    lines = [r.getMessage() for r in caplog.records if r.name == "attnserve.engine"]
    assert len(lines) == 1 and "int8" in lines[0] and "fp32" in lines[0] and "\n" not in lines[0]
    assert engine.generate(["hello"], greedy())[0].token_ids


def test_a_v2_variant_asked_for_by_name_that_cannot_run_stops_with_one_line(no_kernel_bundle):
    with pytest.raises(BundleError) as info:
        Engine(load_bundle(no_kernel_bundle), variant="int8", provider="cpu", threads=1)
    msg = str(info.value)
    assert "int8" in msg and "GroupQueryAttentionV99" in msg and "\n" not in msg


def test_a_v2_graph_lacking_a_recorded_input_stops_start_up_naming_it(tiny_bundle_dir, tmp_path):
    out = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, out)

    def drop_total(m):  # total_sequence_length becomes a constant inside the graph: no longer an input
        value = [i for i in m.graph.input if i.name == "total_sequence_length"][0]
        m.graph.input.remove(value)
        m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([48], np.int32), "total_sequence_length"))

    _break_v2_decoder(out, drop_total)
    with pytest.raises(BundleError) as info:
        Engine(load_bundle(out), variant="int8", provider="cpu", threads=1)
    assert "total_sequence_length" in str(info.value) and "\n" not in str(info.value)


def test_a_bundle_with_only_v1_graphs_still_loads_and_serves(tiny_bundle_dir, tmp_path):
    out = tmp_path / "v1"
    shutil.copytree(tiny_bundle_dir, out)
    meta = json.loads((out / "bundle.json").read_text())
    variants = {"fp32": {k: v for k, v in meta["variants"]["fp32"].items() if k != "kv_cache"}}
    io = {k: v for k, v in meta["io"].items() if k != "decoder_v2"}
    rewrite(out, format_version=1, variants=variants, io=io, default_variant={"cpu": "fp32", "cuda": "fp32"})
    engine = Engine(load_bundle(out), provider="cpu", threads=1)
    assert engine.kv_cache == "concat" and engine.variant == "fp32"
    assert engine.generate(["hello"], greedy())[0].token_ids


def test_info_shows_the_served_cache_layout_and_its_bytes(tiny_int8_bundle_dir):
    import httpx
    from service_harness import serving

    with serving(tiny_int8_bundle_dir) as s:
        info = httpx.get(s.url + "/info", timeout=30).json()
        answer = httpx.post(s.url + "/generate", json={"inputs": "hello"}, timeout=30)
    cfg = json.loads((tiny_int8_bundle_dir / "bundle.json").read_text())["config"]
    per_row = 2 * cfg["n_decoder_layers"] * cfg["d_model"] * cfg["max_target_len"] * 4
    assert info["variant"] == "int8" and info["kv_cache"] == "in_place" and info["model_dtype"] == "int8"
    assert info["kv_cache_bytes_per_row"] == per_row
    assert info["kv_cache_bytes_at_max_batch_size"] == per_row * info["max_batch_size"]
    assert answer.status_code == 200 and answer.json()["generated_text"]
