"""The parity suite: what a bundle must prove before anything serves it.

1. Per graph, at (B, S) = (1,1), (2,7), (3,1), (4,11) and past lengths 0 and
   5 (rows of one batch with different real past lengths): ONNX Runtime fp32
   within 1e-4 of PyTorch, and every output the right size (no frozen axis).
2. Step-by-step cached logits equal the full teacher-forced logits.
3. Greedy ids of the service's engine identical to the PyTorch reference on a
   corpus of >= 200 inputs, one at a time, in padded batches, and under
   continuous batching (rows joining at different steps).
4. Seeded sampling: the same ids as the reference.
5. Teacher-forced steps: on every parity input, TF_STEPS cached steps over given tokens (the reference
   answer, then fixed filler tokens), so the check does not depend on how long the model's answers
   are: logits within 1e-4 of PyTorch's full teacher-forced forward, the same argmax.
6. The proof has power: either the free-running answers say something (mean output length >= 5,
   >= 100 distinct outputs), or, for a model whose answers are short or drawn from few labels, the
   teacher-forced logits move with the input (a graph that mixed up its inputs would show).
Plus: fp16 on CPU within 1e-2 of fp32 relative to the largest logit (at least 1), int8's greedy agreement with fp32.

With the run directory the reference is recomputed with PyTorch; without it the
reference ids recorded in the bundle at build time (parity_corpus.json) are used,
and the numerical checks compare cached steps with the graph's own full forward.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from service.engine.bundle import load_bundle
from service.engine.engine import DecodingOptions, Engine
from service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEXT_TOKEN,
    POSITION_IDS,
    past_name,
    past_names,
    present_names,
)

SHAPES = [(1, 1), (2, 7), (3, 1), (4, 11)]
PAST_LENGTHS = [0, 5]
TOL_FP32 = 1e-4
# fp16 against fp32, relative to the logits' largest magnitude (at least 1): float16 keeps 11 significant bits,
# so its rounding grows with the numbers it holds, and CPUs with native float16 arithmetic (AVX512-FP16) round
# more of the sums in float16 than CPUs that widen them to float32. An absolute 1e-2 failed a tiny test model
# with logits near 12 on such a CPU (1.17e-2) while the same graphs passed on another.
TOL_FP16 = 1e-2
MIN_CORPUS = 200
MIN_MEAN_LEN = 5.0
MIN_DISTINCT = 100
TF_STEPS = 8  # teacher-forced positions per parity input (at most the model's max_target_len)
TF_BATCH = 32
TF_FILLER_SEED = 7  # the tokens fed after the reference answer: the same for every input and every build
MIN_SOURCE_SPREAD = 1.0  # the first step's logits must move by this much (of some token, across inputs)
SAMPLING_CASES = [
    {"do_sample": True},
    {"temperature": 0.7, "top_k": 5},
    {"temperature": 1.2, "top_p": 0.9},
    {"do_sample": True, "repetition_penalty": 1.3},
    {"repetition_penalty": 1.5},  # greedy with a penalty
]
N_SAMPLING = 50
BEAM_WIDTH = 4  # beam parity: the n-best of beam search, width 4
TOL_SCORE = 1e-4  # hypothesis scores (mean log-probability), ONNX Runtime vs PyTorch


# ---- corpus -----------------------------------------------------------------------------
def default_corpus(train_cfg: dict, limit: int) -> list[str]:
    """Dev-split sources of the run's dataset (then test, then train if dev is small)."""
    from training.data import DataError, load_examples

    out: list[str] = []
    for split in ("dev", "test", "train"):
        try:
            out += [e.source for e in load_examples(train_cfg.get("dataset", "cmudict"), split, limit=limit)]
        except DataError:
            continue
        if len(out) >= limit:
            break
    return list(dict.fromkeys(out))[:limit]


def sampling_options(i: int, max_new_tokens: int) -> DecodingOptions:
    return DecodingOptions(max_new_tokens=max_new_tokens, seed=1000 + i, **SAMPLING_CASES[i % len(SAMPLING_CASES)])


def source_ids(src_tok, text: str, max_source_len: int, unk_id: int) -> list[int]:
    """As training evaluates: truncate to the model's limit; an unreadable input becomes unk."""
    ids = src_tok.encode(text, add_special_tokens=False).ids[:max_source_len]
    return ids or [unk_id]


def beam_options(max_new_tokens: int) -> DecodingOptions:
    return DecodingOptions(max_new_tokens=max_new_tokens, best_of=BEAM_WIDTH)


def reference_outputs(model, ids: list[list[int]], length_bound=None) -> dict:
    """PyTorch greedy ids for every input, sampled ids for the first N_SAMPLING (one input at a
    time), and beam search (width BEAM_WIDTH, all inputs in one batch): its hypotheses and scores.
    `length_bound`: source length -> the bundle's bound, applied as the engine applies it."""
    import torch

    from training.decode import generate, generate_ids

    n_max = model.cfg.max_target_len
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny per-step work: one thread is faster than two fighting
    try:
        kw = {"length_bound": length_bound}
        greedy = [generate_ids(model, [x], DecodingOptions(max_new_tokens=n_max), **kw)[0] for x in ids]
        sampled = [generate_ids(model, [x], sampling_options(i, n_max), **kw)[0] for i, x in enumerate(ids[:N_SAMPLING])]
        beams = generate(model, ids, beam_options(n_max), **kw)
    finally:
        torch.set_num_threads(threads)
    return {
        "greedy": greedy,
        "sampled": sampled,
        "beam": {
            "width": BEAM_WIDTH,
            "hypotheses": [[h.token_ids for h in g.hypotheses] for g in beams],
            "scores": [[h.score for h in g.hypotheses] for g in beams],
        },
    }


def make_parity_corpus(model, src_tok, sources: list[str], length_bound=None) -> dict:
    cfg = model.cfg
    ids = [source_ids(src_tok, s, cfg.max_source_len, cfg.unk_id) for s in sources]
    corpus = {"sources": sources, "source_ids": ids, **reference_outputs(model, ids, length_bound)}
    tokens = forced_tokens(corpus["greedy"], cfg.bos_id, cfg.tgt_vocab_size, cfg.max_target_len)
    logits = teacher_forced_torch(model, ids, tokens)  # [N, T, V]
    top2 = np.sort(logits, axis=-1)[..., -2:]
    corpus["teacher_forced"] = {
        "tokens": tokens,
        "argmax": logits.argmax(-1).tolist(),
        "top_logit": top2[..., 1].tolist(),
        "margin": (top2[..., 1] - top2[..., 0]).tolist(),
        "source_spread": source_spread(logits),
    }
    return corpus


# ---- teacher forcing: parity that does not depend on the model's answer lengths -------------------
def forced_tokens(greedy: list[list[int]], bos_id: int, vocab: int, max_target_len: int) -> list[list[int]]:
    """The tokens fed at each teacher-forced step, per input: bos, the reference greedy answer, then filler
    tokens (seeded, one sequence for all inputs), cut to min(TF_STEPS, max_target_len)."""
    steps = min(TF_STEPS, max_target_len)
    filler = np.random.default_rng(TF_FILLER_SEED).integers(4, max(5, vocab), steps).tolist()
    return [([bos_id, *answer] + filler)[:steps] for answer in greedy]


def teacher_forced_torch(model, source: list[list[int]], tokens: list[list[int]]) -> np.ndarray:
    """PyTorch's full teacher-forced forward: logits [N, T, V] at every fed token (batches of TF_BATCH)."""
    import torch

    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for i in range(0, len(source), TF_BATCH):
                src, mask = padded(source[i : i + TF_BATCH], model.cfg.pad_id)
                tgt = torch.tensor(tokens[i : i + TF_BATCH])
                src_t, mask_t = torch.from_numpy(src), torch.from_numpy(mask)
                out.append(model(src_t, mask_t, tgt, torch.ones_like(tgt)).float().numpy())
    finally:
        torch.set_num_threads(threads)
    return np.concatenate(out)


def padded(rows: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [B, S] and their mask (1 real, 0 padding)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
        mask[r, : len(row)] = 1
    return ids, mask


def teacher_forced_graphs(engine: Engine, source: list[list[int]], tokens: list[list[int]]) -> np.ndarray:
    """The bundle's fp32 graphs over the same tokens, one cached step at a time as the service steps (padded
    source batches of TF_BATCH): logits [N, T, V]."""
    n2 = 2 * engine.n_layers
    out = []
    for i in range(0, len(source), TF_BATCH):
        src, mask = padded(source[i : i + TF_BATCH], engine.pad_id)
        fed = np.asarray(tokens[i : i + TF_BATCH], np.int64)
        b = len(src)
        bias, *cross = engine.encoder.run(None, {INPUT_IDS: src, ATTENTION_MASK: mask})
        past = [np.zeros((b, engine.n_heads, 0, engine.head_dim), engine.kv_dtype)] * n2
        steps = []
        for t in range(fed.shape[1]):
            result = engine.decoder.run(
                None,
                {
                    INPUT_IDS: fed[:, t : t + 1],
                    POSITION_IDS: np.full((b, 1), t, np.int64),
                    DECODER_ATTENTION_MASK: np.ones((b, t + 1), np.int64),
                    ENCODER_ATTENTION_BIAS: bias,
                    **dict(zip(engine.past_names, past)),
                    **dict(zip(engine.cross_names, cross)),
                },
            )
            steps.append(result[0])
            past = result[1 : 1 + n2]
        out.append(np.stack(steps, axis=1))
    return np.concatenate(out)


def source_spread(logits: np.ndarray) -> float:
    """How far the input moves the first step's logits: the largest, over tokens, of (max - min across
    inputs). Near 0, the model answers alike whatever it reads, and no comparison of its outputs could
    tell a graph that mixed up its inputs from a right one."""
    first = logits[:, 0, :]
    return float((first.max(axis=0) - first.min(axis=0)).max())


def teacher_forced_parity(engine: Engine, corpus: dict, model=None) -> dict:
    """The graphs' teacher-forced logits against PyTorch's full forward (with the run), or against the argmax
    and top logit recorded at build (without it). An argmax only counts as different where the reference's
    top two logits are further apart than the tolerance (a near tie may fall either way)."""
    rec = corpus["teacher_forced"]
    ids, tokens = corpus["source_ids"], rec["tokens"]
    got = teacher_forced_graphs(engine, ids, tokens)
    if model is not None:
        want = teacher_forced_torch(model, ids, tokens)
        top2 = np.sort(want, axis=-1)[..., -2:]
        ref_argmax, ref_top, margin = want.argmax(-1), top2[..., 1], top2[..., 1] - top2[..., 0]
        logit_diff = float(np.abs(got - want).max())
        spread = source_spread(want)
    else:
        ref_argmax, ref_top, margin = (np.asarray(rec[k]) for k in ("argmax", "top_logit", "margin"))
        logit_diff = float(np.abs(got.max(-1) - ref_top).max())
        spread = float(rec["source_spread"])
    decided = margin > TOL_FP32
    figures = {
        "inputs": len(ids),
        "steps_per_input": len(tokens[0]) if tokens else 0,
        "compared_with": "pytorch full forward" if model is not None else "argmax and top logit recorded at build",
        "max_abs_diff_" + ("logits" if model is not None else "top_logit"): logit_diff,
        "argmax_mismatches": int(((got.argmax(-1) != ref_argmax) & decided).sum()),
        "positions": int(decided.size),
        "source_spread": spread,
    }
    return figures


# ---- graph-level checks -------------------------------------------------------------------
def graph_inputs(engine: Engine, b: int, s: int, p: int, seed: int = 0) -> tuple[dict, dict]:
    """Encoder feeds, and decoder feeds for one step after a real past of up to p tokens.

    Row r has source length max(1, s - r) (right padding) and real past length
    max(0, p - r) (left padding, mask 0), as a continuous batch holds them. The past
    is computed by the ONNX decoder itself over the prefix in one call (T = p).
    """
    rng = np.random.default_rng(seed)
    src_v = int(engine.bundle.config["src_vocab_size"])
    tgt_v = int(engine.bundle.config["tgt_vocab_size"])
    src = rng.integers(4, src_v, (b, s)).astype(np.int64)
    src_mask = np.zeros((b, s), np.int64)
    for r in range(b):
        src_mask[r, : max(1, s - r)] = 1
    src = np.where(src_mask == 1, src, engine.pad_id)
    enc_feeds = {INPUT_IDS: src, ATTENTION_MASK: src_mask}
    bias, *cross = engine.encoder.run(None, enc_feeds)
    n2 = 2 * engine.n_layers
    real = [max(0, p - r) for r in range(b)]
    past_mask = np.zeros((b, p), np.int64)
    prefix = np.full((b, p), engine.pad_id, np.int64)
    positions = np.zeros((b, p), np.int64)
    for r in range(b):
        past_mask[r, p - real[r] :] = 1
        prefix[r, p - real[r] :] = np.concatenate([[engine.bos_id], rng.integers(4, tgt_v, max(0, real[r] - 1))])[: real[r]]
        positions[r, p - real[r] :] = np.arange(real[r])
    empty = np.zeros((b, engine.n_heads, 0, engine.head_dim), engine.kv_dtype)
    if p:
        feeds = {
            INPUT_IDS: prefix,
            POSITION_IDS: positions,
            DECODER_ATTENTION_MASK: past_mask,
            ENCODER_ATTENTION_BIAS: bias,
            **dict(zip(engine.past_names, [empty] * n2)),
            **dict(zip(engine.cross_names, cross)),
        }
        past = engine.decoder.run(None, feeds)[1 : 1 + n2]
    else:
        past = [empty] * n2
    dec_feeds = {
        INPUT_IDS: rng.integers(4, tgt_v, (b, 1)).astype(np.int64),
        POSITION_IDS: np.array([[x] for x in real], np.int64),
        DECODER_ATTENTION_MASK: np.concatenate([past_mask, np.ones((b, 1), np.int64)], axis=1),
        ENCODER_ATTENTION_BIAS: bias,
        **dict(zip(engine.past_names, past)),
        **dict(zip(engine.cross_names, cross)),
    }
    return enc_feeds, dec_feeds


def graph_parity(engine: Engine, model=None) -> dict:
    """Max |ORT - PyTorch| per graph over SHAPES x PAST_LENGTHS; shape checks always."""
    import torch

    from export.graphs.v1 import DecoderGraph, EncoderGraph

    enc_diff = logit_diff = present_diff = 0.0
    problems = []
    h, dh, v = engine.n_heads, engine.head_dim, int(engine.bundle.config["tgt_vocab_size"])
    for b, s in SHAPES:
        for p in PAST_LENGTHS:
            enc_feeds, dec_feeds = graph_inputs(engine, b, s, p)
            enc_out = engine.encoder.run(None, enc_feeds)
            dec_names = [o.name for o in engine.decoder.get_outputs()]
            dec_out = dict(zip(dec_names, engine.decoder.run(None, dec_feeds)))
            self_key, cross_key = present_names(1, DECODER)[0], present_names(1, ENCODER)[0]  # layer 0's keys
            expect = {LOGITS: (b, v), self_key: (b, h, p + 1, dh)}
            got = {k: dec_out[k].shape for k in expect} | {cross_key: enc_out[1].shape}
            expect[cross_key] = (b, h, s, dh)
            if got != expect:
                problems.append(f"(B,S,P)=({b},{s},{p}): shapes {got} != {expect}")
            if NEXT_TOKEN in dec_out and not np.array_equal(dec_out[NEXT_TOKEN], dec_out[LOGITS].argmax(-1)):
                problems.append(f"(B,S,P)=({b},{s},{p}): next_token is not argmax(logits)")
            if model is None:
                continue
            with torch.no_grad():
                t_enc = EncoderGraph(model)(*(torch.from_numpy(enc_feeds[k]) for k in (INPUT_IDS, ATTENTION_MASK)))
                names = [i.name for i in engine.decoder.get_inputs()]
                t_dec = DecoderGraph(model, next_token=False)(*(torch.from_numpy(np.asarray(dec_feeds[n])) for n in names))
            enc_diff = max(enc_diff, *(float(np.abs(a - t.numpy()).max()) for a, t in zip(enc_out, t_enc)))
            logit_diff = max(logit_diff, float(np.abs(dec_out[LOGITS] - t_dec[0].numpy()).max()))
            n2 = 2 * engine.n_layers
            present_diff = max(
                present_diff,
                *(float(np.abs(dec_out[name] - t.numpy()).max()) for name, t in zip(dec_names[1 : 1 + n2], t_dec[1 : 1 + n2])),
            )
    figures = {"shapes_b_s": SHAPES, "past_lengths": PAST_LENGTHS, "tolerance": TOL_FP32, "shape_problems": problems}
    if model is not None:
        figures |= {
            "encoder_max_abs_diff": enc_diff,
            "decoder_logits_max_abs_diff": logit_diff,
            "decoder_present_max_abs_diff": present_diff,
        }
    return figures


def cached_vs_full(engine: Engine, corpus: dict, model=None, n: int = 16) -> dict:
    """Logits of cached one-token steps vs the full teacher-forced forward (PyTorch, and the graph
    itself run on the whole prefix with P = 0), along the reference greedy outputs."""
    import torch

    n2 = 2 * engine.n_layers
    vs_torch = vs_graph = 0.0
    for src, tgt in list(zip(corpus["source_ids"], corpus["greedy"]))[:n]:
        tokens = [engine.bos_id, *tgt]  # fed tokens; logits predict tgt + eos
        src_a = np.array([src], np.int64)
        bias, *cross = engine.encoder.run(None, {INPUT_IDS: src_a, ATTENTION_MASK: np.ones_like(src_a)})
        base = {ENCODER_ATTENTION_BIAS: bias, **dict(zip(engine.cross_names, cross))}
        past = [np.zeros((1, engine.n_heads, 0, engine.head_dim), engine.kv_dtype)] * n2
        stepped = []
        for t, tok in enumerate(tokens):
            out = engine.decoder.run(
                None,
                {
                    **base,
                    INPUT_IDS: np.array([[tok]], np.int64),
                    POSITION_IDS: np.array([[t]], np.int64),
                    DECODER_ATTENTION_MASK: np.ones((1, t + 1), np.int64),
                    **dict(zip(engine.past_names, past)),
                },
            )
            stepped.append(out[0][0])
            past = out[1 : 1 + n2]
            full = engine.decoder.run(
                None,
                {
                    **base,
                    INPUT_IDS: np.array([tokens[: t + 1]], np.int64),
                    POSITION_IDS: np.arange(t + 1, dtype=np.int64)[None],
                    DECODER_ATTENTION_MASK: np.ones((1, t + 1), np.int64),
                    **dict(zip(engine.past_names, [np.zeros((1, engine.n_heads, 0, engine.head_dim), engine.kv_dtype)] * n2)),
                },
            )[0][0]
            vs_graph = max(vs_graph, float(np.abs(full - stepped[-1]).max()))
        if model is not None:
            with torch.no_grad():
                tgt_in = torch.tensor([tokens])
                src_t = torch.from_numpy(src_a)
                teacher = model(src_t, torch.ones_like(src_t), tgt_in, torch.ones_like(tgt_in))
            vs_torch = max(vs_torch, float(np.abs(teacher[0].numpy() - np.stack(stepped)).max()))
    figures = {"sequences": min(n, len(corpus["greedy"])), "cached_vs_full_graph_max_abs_diff": vs_graph}
    if model is not None:
        figures["cached_vs_pytorch_teacher_forced_max_abs_diff"] = vs_torch
    return figures


# ---- decoding checks ----------------------------------------------------------------------
def count_mismatches(results, expected: list[list[int]]) -> int:
    return sum(r.token_ids != e for r, e in zip(results, expected))


def greedy_parity(engine: Engine, corpus: dict) -> dict:
    ids, expected = corpus["source_ids"], corpus["greedy"]
    greedy = DecodingOptions(max_new_tokens=engine.max_target_len)
    single = engine.generate(ids, greedy, batch_size=1)
    padded = engine.generate(ids, greedy, batch_size=32)
    # input order, not sorted by length: rows of a step then differ in source as well as past length
    continuous = engine.generate(ids, greedy, batch_size=7, refill=True, sort=False)
    return {
        "inputs": len(ids),
        "mismatches_one_at_a_time": count_mismatches(single, expected),
        "mismatches_padded_batches_32": count_mismatches(padded, expected),
        "mismatches_continuous_batching_7": count_mismatches(continuous, expected),
        "mean_output_len": float(np.mean([len(x) for x in expected])) if expected else 0.0,
        "distinct_outputs": len({tuple(x) for x in expected}),
    }


def corpus_failures(g: dict, tf: dict | None = None) -> list[str]:
    """A parity proof needs enough inputs and a check with power: free-running answers that say something
    (not eos at once), or, for short answers and labels, teacher-forced logits `tf` that move with the input.
    `tf` None: a bundle whose corpus predates the teacher-forced check."""
    out = []
    if g["inputs"] < MIN_CORPUS:
        out.append(f"parity corpus has {g['inputs']} inputs (< {MIN_CORPUS})")
    if g["mean_output_len"] >= MIN_MEAN_LEN and g["distinct_outputs"] >= MIN_DISTINCT:
        return out
    answers = (
        f"mean output length {g['mean_output_len']:.2f} (need {MIN_MEAN_LEN}), "
        f"{g['distinct_outputs']} distinct outputs (need {MIN_DISTINCT})"
    )
    if tf is None:
        out.append(
            f"model too trivial to prove parity by its answers alone: {answers}, and the bundle's parity corpus "
            "has no teacher-forced record: rebuild the bundle with attnserve-export build to record one"
        )
    elif tf["source_spread"] < MIN_SOURCE_SPREAD:
        out.append(
            f"parity cannot be proven: {answers}, and the first step's logits hardly depend on the input "
            f"(spread {tf['source_spread']:.3g} over {tf['inputs']} inputs, need {MIN_SOURCE_SPREAD}), so the model "
            "ignores what it reads: train it longer (check its dev figures), or pass --dataset FILE.tsv with more varied inputs"
        )
    return out


def sampling_parity(engine: Engine, corpus: dict) -> dict:
    ids = corpus["source_ids"][: len(corpus["sampled"])]
    opts = [sampling_options(i, engine.max_target_len) for i in range(len(ids))]
    results = engine.generate(ids, opts, batch_size=5, refill=True, sort=False)
    return {
        "inputs": len(ids),
        "cases": SAMPLING_CASES,
        "mismatches_continuous_batching_5": count_mismatches(results, corpus["sampled"]),
        "distinct_outputs": len({tuple(r.token_ids) for r in results}),
    }


def beam_parity(engine: Engine, corpus: dict) -> dict:
    """Beam search through ONNX Runtime against the PyTorch reference: the same hypotheses in the same
    order, scores within TOL_SCORE; one request at a time, and in continuous batches beside greedy
    and sampled rows."""
    ref = corpus["beam"]
    ids = corpus["source_ids"]
    beam = beam_options(engine.max_target_len)
    alone = engine.generate(ids, beam, batch_size=BEAM_WIDTH)
    # every third request is beam search; the others greedy or sampled: rows of all kinds share steps
    mixed_opts = [
        beam
        if i % 3 == 0
        else sampling_options(i, engine.max_target_len)
        if i % 3 == 1
        else DecodingOptions(max_new_tokens=engine.max_target_len)
        for i in range(len(ids))
    ]
    mixed = engine.generate(ids, mixed_opts, batch_size=13, refill=True, sort=False)
    out = {"inputs": len(ids), "width": ref["width"]}
    for name, results, which in (("alone", alone, range(len(ids))), ("continuous_batching_mixed", mixed, range(0, len(ids), 3))):
        mismatches, worst = 0, 0.0
        for i in which:
            hyps = results[i].hypotheses
            if [h.token_ids for h in hyps] != ref["hypotheses"][i]:
                mismatches += 1
                continue
            worst = max([worst, *(abs(h.score - r) for h, r in zip(hyps, ref["scores"][i]))])
        out[f"mismatches_{name}"] = mismatches
        out[f"score_max_abs_diff_{name}"] = worst
        out[f"checked_{name}"] = len(which)
    return out


def fp16_check(bundle, threads: int | None) -> dict:
    """fp16 graphs vs fp32 on CPU over SHAPES x PAST_LENGTHS (no GPU needed: ONNX Runtime's CPU
    provider runs float16 graphs); logits compared as float32 at the boundary. A v2 fp16 decoder
    (in-place cache) is checked step by step by export/fused_check.py."""
    if bundle.kv_cache("fp16") == "in_place":
        return fp16_v2_check(bundle, threads)
    e32 = Engine(bundle, variant="fp32", provider="cpu", threads=threads)
    e16 = Engine(bundle, variant="fp16", provider="cpu", threads=threads)
    diff = scale = 0.0
    for b, s in SHAPES:
        for p in PAST_LENGTHS:
            enc32, dec32 = graph_inputs(e32, b, s, p)
            enc16, dec16 = graph_inputs(e16, b, s, p)  # same seed: same ids, fp16 past from the fp16 graph
            ref = e32.decoder.run([LOGITS], dec32)[0]
            got = e16.decoder.run([LOGITS], dec16)[0]
            diff = max(diff, float(np.abs(ref - got).max()))
            scale = max(scale, float(np.abs(ref).max()))
    tolerance = TOL_FP16 * max(1.0, scale)
    return {
        "max_abs_diff_logits_vs_fp32": diff,
        "max_abs_logit": scale,
        "tolerance": tolerance,
        "ok": diff <= tolerance,
        "checked_on": f"onnxruntime {e16.provider} (no GPU at export); CUDA not exercised here",
    }


def int8_agreement(bundle, corpus: dict, threads: int | None) -> dict:
    e8 = Engine(bundle, variant="int8", provider="cpu", threads=threads)
    res = e8.generate(corpus["source_ids"], DecodingOptions(max_new_tokens=e8.max_target_len), batch_size=32)
    same = sum(r.token_ids == e for r, e in zip(res, corpus["greedy"]))
    return {"greedy_agreement_with_fp32_reference_pct": 100.0 * same / max(1, len(res))}


def run_parity(bundle_dir: Path, model=None, threads: int | None = None, log=print) -> dict:
    """Every check; returns {"figures": {...}, "failures": [one line each]}."""
    bundle = load_bundle(bundle_dir)
    corpus = json.loads((Path(bundle_dir) / bundle.meta.get("parity_corpus", "parity_corpus.json")).read_text())
    failures: list[str] = []
    t0 = time.perf_counter()
    if model is not None:
        fresh = reference_outputs(model, corpus["source_ids"], bundle.length_bound if bundle.meta.get("length_bound") else None)
        if fresh["greedy"] != corpus["greedy"] or fresh["sampled"] != corpus["sampled"]:
            failures.append("the run's PyTorch outputs differ from the ones recorded in the bundle (bundle from another run?)")
        corpus = {**corpus, **fresh}
    engine = Engine(bundle, variant="fp32", provider="cpu", threads=threads)
    figures: dict = {"reference": "pytorch (recomputed from the run)" if model is not None else "recorded at build"}

    figures["graphs"] = graph_parity(engine, model)
    failures += figures["graphs"]["shape_problems"]
    for key in ("encoder_max_abs_diff", "decoder_logits_max_abs_diff", "decoder_present_max_abs_diff"):
        if figures["graphs"].get(key, 0.0) > TOL_FP32:
            failures.append(f"{key} = {figures['graphs'][key]:.2e} > {TOL_FP32}")
    log(f"[verify] graphs: {figures['graphs']}")

    figures["cached_vs_full"] = cached_vs_full(engine, corpus, model)
    for key, value in figures["cached_vs_full"].items():
        if key.endswith("max_abs_diff") and value > TOL_FP32:
            failures.append(f"{key} = {value:.2e} > {TOL_FP32}")
    log(f"[verify] cached vs full: {figures['cached_vs_full']}")

    g = figures["greedy"] = greedy_parity(engine, corpus)
    for key in ("mismatches_one_at_a_time", "mismatches_padded_batches_32", "mismatches_continuous_batching_7"):
        if g[key]:
            failures.append(f"greedy {key} = {g[key]} of {g['inputs']}")
    log(f"[verify] greedy: {g}")

    tf = None
    if "teacher_forced" in corpus:  # bundles built before it have no teacher-forced record
        tf = figures["teacher_forced"] = teacher_forced_parity(engine, corpus, model)
        diff_key = next(k for k in tf if k.startswith("max_abs_diff_"))
        if tf[diff_key] > TOL_FP32:
            failures.append(f"teacher-forced {diff_key} = {tf[diff_key]:.2e} > {TOL_FP32}")
        if tf["argmax_mismatches"]:
            failures.append(f"teacher-forced argmax differs at {tf['argmax_mismatches']} of {tf['positions']} positions")
        log(f"[verify] teacher-forced: {tf}")
    failures += corpus_failures(g, tf)

    sp = figures["sampling"] = sampling_parity(engine, corpus)
    if sp["mismatches_continuous_batching_5"]:
        failures.append(f"sampling mismatches = {sp['mismatches_continuous_batching_5']} of {sp['inputs']}")
    log(f"[verify] sampling: {sp}")

    if "beam" in corpus:  # bundles built before beam search have no beam references
        bp = figures["beam"] = beam_parity(engine, corpus)
        for key in ("alone", "continuous_batching_mixed"):
            if bp[f"mismatches_{key}"]:
                failures.append(f"beam search mismatches ({key}) = {bp[f'mismatches_{key}']} of {bp[f'checked_{key}']}")
            if bp[f"score_max_abs_diff_{key}"] > TOL_SCORE:
                failures.append(f"beam scores ({key}) differ by {bp[f'score_max_abs_diff_{key}']:.2e} > {TOL_SCORE}")
        log(f"[verify] beam search: {bp}")

    if "fp16" in bundle.variants:
        figures["fp16"] = fp16_check(bundle, threads)
        if not figures["fp16"]["ok"]:
            f16 = figures["fp16"]
            failures.append(
                f"fp16 logits differ from fp32 by {f16['max_abs_diff_logits_vs_fp32']:.2e} > {f16['tolerance']:.2e}"
                f" ({TOL_FP16} x the largest |logit|, at least 1)"
            )
        log(f"[verify] fp16: {figures['fp16']}")
    if "int8" in bundle.variants:
        figures["int8"] = int8_agreement(bundle, corpus, threads)
        log(f"[verify] int8: {figures['int8']}")
    for name in bundle.variants:  # v2 variants (in-place cache) that run on the CPU: fp16 is checked above
        if bundle.kv_cache(name) == "in_place" and name != "fp16":
            v2_engine = Engine(bundle, variant=name, provider="cpu", threads=threads)
            v2 = v2_parity(v2_engine, corpus, exact=name.startswith("fp32"))
            failures += v2.pop("failures")
            figures[f"v2_{name}"] = v2
            log(f"[verify] v2 {name}: {v2}")
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    figures["passed"] = not failures
    return {"figures": figures, "failures": failures}


# ---- v2 variants (fused decoder, in-place cache: export/fused.py) ----------------------------------
def v2_parity(engine, corpus: dict, exact: bool) -> dict:
    """`attnserve-export verify` on a v2 variant, through the service's own loop (`engine`): greedy, seeded
    sampling and beam 4, one request at a time and inside continuous batches (beam rows beside greedy and
    sampled ones). Alone and batched must give the same ids (and beam scores) bitwise; against the PyTorch
    reference in `corpus` (beam: where the corpus records it), a float32 variant (`exact`) must give the same
    ids, an int8 one reports its agreement (its accuracy is the int8 gate's dev WER). Returns figures with
    "failures" (one line each)."""
    ids, n = corpus["source_ids"], engine.max_target_len
    greedy = DecodingOptions(max_new_tokens=n)
    sampled_ids = ids[: len(corpus["sampled"])]
    sampling = [sampling_options(i, n) for i in range(len(sampled_ids))]
    beam = beam_options(n)
    runs = {
        "greedy": (ids, greedy, engine.generate(ids, greedy, batch_size=1)),
        "sampling": (sampled_ids, sampling, [engine.generate([x], [o], batch_size=1)[0] for x, o in zip(sampled_ids, sampling)]),
    }
    runs["beam"] = (ids, beam, engine.generate(ids, beam, batch_size=beam.n_rows))
    mixed_opts = [beam if i % 3 == 0 else sampling_options(i, n) if i % 3 == 1 else greedy for i in range(len(ids))]
    mixed = engine.generate(ids, mixed_opts, batch_size=13, refill=True, sort=False)
    batched = {
        "greedy": engine.generate(ids, greedy, batch_size=7, refill=True, sort=False),
        "sampling": engine.generate(sampled_ids, sampling, batch_size=5, refill=True, sort=False),
    }
    out: dict = {"variant": engine.variant, "kv_cache": engine.kv_cache, "inputs": len(ids)}
    failures = []
    for kind, (_, _, alone) in runs.items():
        together = batched.get(kind)
        pairs = list(zip(alone, together)) if together is not None else []
        if kind == "beam":
            pairs = [(alone[i], mixed[i]) for i in range(0, len(ids), 3)]
        differ = sum(
            [h.token_ids for h in a.hypotheses] != [h.token_ids for h in b.hypotheses]
            or any(x.score != y.score for x, y in zip(a.hypotheses, b.hypotheses))
            if kind == "beam"
            else a.token_ids != b.token_ids
            for a, b in pairs
        )
        out[f"{kind}_alone_vs_continuous_batching_differ"] = differ
        if differ:
            failures.append(f"{engine.variant}: {kind} alone vs in continuous batches differs for {differ} of {len(pairs)}")
        if kind == "beam" and "beam" not in corpus:  # bundles built before beam search record no beam reference
            continue
        if kind == "beam":
            ref = corpus["beam"]["hypotheses"]
            same = sum([h.token_ids for h in r.hypotheses] == e for r, e in zip(alone, ref))
        else:
            ref = corpus["greedy" if kind == "greedy" else "sampled"]
            same = sum(r.token_ids == e for r, e in zip(alone, ref))
        out[f"{kind}_agreement_with_reference_pct"] = round(100.0 * same / max(1, len(alone)), 2)
        if exact and same != len(alone):
            wrong = len(alone) - same
            failures.append(f"{engine.variant}: {kind} differs from the PyTorch reference for {wrong} of {len(alone)}")
    out["failures"] = failures
    return out


def fp16_v2_check(bundle, threads: int | None = None, rows: int = 16, steps: int = 8) -> dict:
    """The fp16 v2 variant (CUDA's) against the v1 float32 graphs, on the CPU (no GPU at export): `rows` parity
    corpus sources, `steps` forced tokens each, logits compared as float32 at the boundary."""
    from export.fused_check import StepRunner, encode_alone, v2_session

    corpus = json.loads((bundle.dir / bundle.meta.get("parity_corpus", "parity_corpus.json")).read_text())
    n, vocab = bundle.n_layers, int(bundle.config["tgt_vocab_size"])
    enc32_path, dec32_path = bundle.graph_paths("fp32")
    enc16_path, dec16_path = bundle.graph_paths("fp16")
    enc32, dec32 = v2_session(enc32_path, threads or 1), v2_session(dec32_path, threads or 1)
    enc16, dec16 = v2_session(enc16_path, threads or 1), v2_session(dec16_path, threads or 1)
    rng = np.random.default_rng(0)
    diff = scale = 0.0
    for ids in corpus["source_ids"][:rows]:
        tokens = [int(bundle.special_ids["bos"]), *rng.integers(4, vocab, steps - 1).tolist()]
        x = np.asarray([ids], np.int64)
        e = dict(zip([o.name for o in enc32.get_outputs()], enc32.run(None, {INPUT_IDS: x, ATTENTION_MASK: np.ones_like(x)})))
        feeds = {ENCODER_ATTENTION_BIAS: e[ENCODER_ATTENTION_BIAS], **{past_name(o): e[o] for o in present_names(n, ENCODER)}}
        t = np.asarray([tokens], np.int64)
        feeds.update({INPUT_IDS: t, POSITION_IDS: np.arange(steps)[None], DECODER_ATTENTION_MASK: np.ones_like(t)})
        h, dh = e[present_names(n, ENCODER)[0]].shape[1::2]
        feeds.update({name: np.zeros((1, h, 0, dh), np.float32) for name in past_names(n, DECODER)})
        # the v1 graph from an empty cache over each prefix: its logits are the last position's
        want = []
        for p in range(steps):
            f = dict(feeds)
            f.update(
                {
                    INPUT_IDS: t[:, : p + 1],
                    POSITION_IDS: np.arange(p + 1)[None],
                    DECODER_ATTENTION_MASK: np.ones((1, p + 1), np.int64),
                }
            )
            want.append(dec32.run([LOGITS], f)[0][0])
        runner = StepRunner(dec16, n, 1, bundle.max_target_len)
        runner.set_cross(*encode_alone(enc16, ids, n))
        for p, token in enumerate(tokens):
            got = runner.step(np.array([token]), np.array([p]))[0][0]
            diff = max(diff, float(np.abs(got.astype(np.float32) - want[p]).max()))
            scale = max(scale, float(np.abs(want[p]).max()))
    tolerance = TOL_FP16 * max(1.0, scale)
    return {
        "max_abs_diff_logits_vs_fp32": diff,
        "max_abs_logit": scale,
        "tolerance": tolerance,
        "ok": diff <= tolerance,
        "checked_on": "onnxruntime CPUExecutionProvider (no GPU at export); CUDA not exercised here",
    }
