"""The fp16 gate's measurements: the fp16 decoder's structure, its greedy answers against the fp32 reference
(agreement, and whether every difference is a near-tie under the fp32 graphs), on the CPU or through CUDA.
No torch: `attnserve-gpu-check` runs these on a GPU host."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from attnserve.export.graphs.format import graph_io
from attnserve.service.engine.bundle import load_bundle
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
from attnserve.service.engine.runtime import session_options

FP16_MIN_AGREEMENT_PCT = 99.0
# A greedy difference is a near-tie when, at the first step where the fp16 ids leave the fp32 reference, the
# fp32 model's log-probabilities of the two tokens differ by at most this (natural log units).
NEAR_TIE_LOGPROB = 0.1


def graph_structure(path: Path) -> dict:
    """What makes the fp16 decoder the CUDA v2 one: its attention operators, its cache and logits types."""
    m = onnx.load(str(path), load_external_data=False)
    ops: dict[str, int] = {}
    for node in m.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    io = graph_io(path)
    types = {v["name"]: v["dtype"] for v in io["inputs"] + io["outputs"]}
    cache = sorted({t for n, t in types.items() if n.endswith((".decoder.key", ".decoder.value"))})
    cross = sorted({t for n, t in types.items() if n.endswith((".encoder.key", ".encoder.value"))})
    return {
        "nodes": len(m.graph.node),
        "GroupQueryAttention": ops.get("GroupQueryAttention", 0),
        "MultiHeadAttention": ops.get("MultiHeadAttention", 0),
        "cache_dtype": cache,
        "cross_dtype": cross,
        "logits_dtype": types.get("logits"),
        "ok": ops.get("GroupQueryAttention", 0) > 0 and cache == ["float16"] and types.get("logits") == "float32",
    }


def cuda_parity(bundle_dir: Path, threads: int | None = None, log=print, variant: str = "fp16") -> dict:
    """Greedy through the engine on CUDA against the fp32 reference recorded in the parity corpus: the
    agreement, and for each difference how near a tie it was under the fp32 graphs (`near_ties`)."""
    bundle = load_bundle(bundle_dir)
    corpus = json.loads((Path(bundle_dir) / bundle.meta.get("parity_corpus", "parity_corpus.json")).read_text())
    engine = Engine(bundle, variant=variant, provider="cuda", threads=threads)
    res = engine.generate(corpus["source_ids"], DecodingOptions(max_new_tokens=engine.max_target_len), batch_size=32)
    got = [r.token_ids for r in res]
    out = agreement(bundle, corpus["source_ids"], corpus["greedy"], got, threads)
    out.update(variant=engine.variant, provider=engine.provider)
    out["proven"] = not out["failures"]
    log(f"[add-variant] CUDA greedy against the fp32 reference: { ({k: v for k, v in out.items() if k != 'differences'}) }")
    return out


def agreement(bundle, sources: list[list[int]], expected: list[list[int]], got: list[list[int]], threads: int | None) -> dict:
    """Greedy ids `got` against the fp32 reference `expected`: the share that agree, and each difference's
    log-probability gap under the fp32 v1 graphs at the first step where they part."""
    differ = [i for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    ties = near_ties(bundle, [sources[i] for i in differ], [expected[i] for i in differ], [got[i] for i in differ], threads)
    for i, t in zip(differ, ties):
        t["index"] = i
    pct = 100.0 * (len(got) - len(differ)) / max(1, len(got))
    worst = max((t["logprob_gap_fp32"] for t in ties), default=0.0)
    failures = []
    if pct < FP16_MIN_AGREEMENT_PCT:
        failures.append(f"greedy agrees with the fp32 reference on {pct:.2f}% (< {FP16_MIN_AGREEMENT_PCT}%)")
    if worst > NEAR_TIE_LOGPROB:
        failures.append(f"a greedy difference is no near-tie: fp32 log-probability gap {worst:.4f} > {NEAR_TIE_LOGPROB}")
    return {
        "inputs": len(got),
        "agreement_pct": round(pct, 2),
        "min_agreement_pct": FP16_MIN_AGREEMENT_PCT,
        "differences": ties,
        "max_logprob_gap_fp32": worst,
        "near_tie_logprob": NEAR_TIE_LOGPROB,
        "failures": failures,
    }


def near_ties(
    bundle, sources: list[list[int]], expected: list[list[int]], got: list[list[int]], threads: int | None
) -> list[dict]:
    """For each (source, reference ids, other ids): the first step where they part and the fp32 v1 graphs'
    log-probabilities of both tokens there (the full prefix from an empty cache, on the CPU)."""
    if not sources:
        return []
    enc_path, dec_path = bundle.graph_paths("fp32")
    so = session_options(threads or 1)
    enc = ort.InferenceSession(str(enc_path), so, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(dec_path), so, providers=["CPUExecutionProvider"])
    n, bos, eos = bundle.n_layers, int(bundle.special_ids["bos"]), int(bundle.special_ids["eos"])
    out = []
    for src, e, g in zip(sources, expected, got):
        e_full, g_full = [*e, eos], [*g, eos]  # a sequence that stops early chose eos there
        t = next(k for k in range(min(len(e_full), len(g_full))) if e_full[k] != g_full[k])
        x = np.asarray([src], np.int64)
        outs = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {INPUT_IDS: x, ATTENTION_MASK: np.ones_like(x)})))
        prefix = np.asarray([[bos, *e_full[:t]]], np.int64)
        feeds = {past_name(o): outs[o] for o in present_names(n, ENCODER)}
        feeds[ENCODER_ATTENTION_BIAS] = outs[ENCODER_ATTENTION_BIAS]
        h, dh = outs[present_names(n, ENCODER)[0]].shape[1::2]
        feeds.update({name: np.zeros((1, h, 0, dh), np.float32) for name in past_names(n, DECODER)})
        feeds.update(
            {
                INPUT_IDS: prefix,
                POSITION_IDS: np.arange(prefix.shape[1], dtype=np.int64)[None],
                DECODER_ATTENTION_MASK: np.ones_like(prefix),
            }
        )
        logits = dec.run([LOGITS], feeds)[0][0].astype(np.float64)
        logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        gap = float(logp[e_full[t]] - logp[g_full[t]])
        out.append({"step": t, "reference_token": e_full[t], "token": g_full[t], "logprob_gap_fp32": round(gap, 5)})
    return out
