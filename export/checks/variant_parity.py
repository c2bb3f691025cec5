"""Parity of the variants beside fp32: fp16 logits on the CPU (v1 graphs, or the v2 decoder step by step), int8's
greedy agreement, and the v2 variants (in-place cache) through the service's own loop, alone and in continuous
batches."""

from __future__ import annotations

import json

import numpy as np

from attnserve.export.checks.corpus import beam_options, sampling_options
from attnserve.export.checks.graph_parity import PAST_LENGTHS, SHAPES, graph_inputs
from attnserve.export.checks.steps import StepRunner, encode_alone, v2_session
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
    past_name,
    past_names,
    present_names,
)

# fp16 against fp32, relative to the logits' largest magnitude (at least 1): float16 keeps 11 significant bits,
# so its rounding grows with the numbers it holds, and CPUs with native float16 arithmetic (AVX512-FP16) round
# more of the sums in float16 than CPUs that widen them to float32. An absolute 1e-2 failed a tiny test model
# with logits near 12 on such a CPU (1.17e-2) while the same graphs passed on another.
TOL_FP16 = 1e-2


def fp16_check(bundle, threads: int | None) -> dict:
    """fp16 graphs vs fp32 on CPU over SHAPES x PAST_LENGTHS (no GPU needed: ONNX Runtime's CPU
    provider runs float16 graphs); logits compared as float32 at the boundary. A v2 fp16 decoder
    (in-place cache) is checked step by step by `fp16_v2_check`."""
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
    return fp16_verdict(diff, scale, e16.provider)


def int8_agreement(bundle, corpus: dict, threads: int | None) -> dict:
    e8 = Engine(bundle, variant="int8", provider="cpu", threads=threads)
    res = e8.generate(corpus["source_ids"], DecodingOptions(max_new_tokens=e8.max_target_len), batch_size=32)
    same = sum(r.token_ids == e for r, e in zip(res, corpus["greedy"]))
    return {"greedy_agreement_with_fp32_reference_pct": 100.0 * same / max(1, len(res))}


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
    return fp16_verdict(diff, scale, "CPUExecutionProvider")


def fp16_verdict(diff: float, scale: float, provider: str) -> dict:
    """The fp16 gate over the largest logit difference from fp32: float16 rounds in proportion to its numbers, so
    the tolerance grows with the largest |logit| (TOL_FP16 x max(1, that))."""
    tolerance = TOL_FP16 * max(1.0, scale)
    return {
        "max_abs_diff_logits_vs_fp32": diff,
        "max_abs_logit": scale,
        "tolerance": tolerance,
        "ok": diff <= tolerance,
        "checked_on": f"onnxruntime {provider} (no GPU at export); CUDA not exercised here",
    }
