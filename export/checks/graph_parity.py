"""Graph-level numerical parity: the bundle's fp32 graphs against PyTorch (with the run) or against themselves
(without it): per graph at several (B, S) and past lengths, step-by-step cached logits against the full
forward, and the teacher-forced logits over the parity corpus's fixed tokens."""

from __future__ import annotations

import numpy as np

from attnserve.export.checks.corpus import TF_BATCH, padded, source_spread, teacher_forced_torch
from attnserve.service.engine.engine import Engine
from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEXT_TOKEN,
    POSITION_IDS,
    present_names,
)

SHAPES = [(1, 1), (2, 7), (3, 1), (4, 11)]
PAST_LENGTHS = [0, 5]
TOL_FP32 = 1e-4


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
    # torch and the traced graphs only with the run: a bundle alone is checked without them
    import torch

    from attnserve.export.graphs.v1 import DecoderGraph, EncoderGraph

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
    import torch  # the PyTorch side runs only with the model: without it, no torch

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
