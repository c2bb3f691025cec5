"""`attnserve-export add-variant BUNDLE fp16`: the CUDA variant added to a bundle from its own fp32 graphs.

No run directory and no PyTorch: the weights are read back from the bundle's v1 fp32 graphs
(training/weights.py, the mapping `requantize` and `attnserve-train --init-from` use), the v2 decoder is
written from them (export/fused.py) and converted to float16 (export/variants.py), beside an fp16 copy
of the encoder. The variant's v1 fallback is the bundle's fp32 variant, which every bundle has.

Checks, recorded in bundle.json `parity.fp16` with the gate that makes fp16 `default_variant.cuda`:
- everywhere: the graph's structure (GroupQueryAttention over a float16 in-place cache, float32 logits),
  its float32 twin (the same v2 graph before the float16 conversion) against the v1 graphs on the
  parity corpus through the engine (exact), and the fp16 graph on the CPU: its logits against fp32
  (reported) and its greedy answers against the fp32 reference (the gate below);
- with CUDA: the same greedy gate on the GPU: at least FP16_MIN_AGREEMENT_PCT of the parity corpus must
  agree with the recorded fp32 reference and every difference must be a near-tie (`near_ties`).
Without CUDA the last line says CUDA parity is still to be proven (`attnserve-gpu-check` proves it).

Works in `BUNDLE.partial` and replaces the bundle only when every check passed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from export.errors import BuildError
from export.graphs.format import graph_io
from export.manifest import PARITY_CORPUS, write_manifest

VARIANT = "fp16"
FILES = {"encoder": "encoder.fp16.onnx", "decoder": "decoder.v2.fp16.onnx"}
TWIN = "fp32-v2"  # the float32 v2 decoder checked on the CPU, then deleted
TWIN_FILE = "decoder.v2.onnx"
FP16_MIN_AGREEMENT_PCT = 99.0
# A greedy difference is a near-tie when, at the first step where the fp16 ids leave the fp32 reference, the
# fp32 model's log-probabilities of the two tokens differ by at most this (natural log units).
NEAR_TIE_LOGPROB = 0.1
PRECISION = (
    "float16 v2 decoder (GroupQueryAttention over a float16 in-place cache, MultiHeadAttention over float16 cross K/V); "
    "LayerNormalization, Softmax and the logits projection in float32; encoder_attention_bias and logits float32 at the "
    "graph boundary"
)


def add_variant(
    bundle_dir: Path, name: str, provider: str = "auto", threads: int | None = None, log: Callable[[str], None] = print
) -> dict:
    """Add variant `name` (only "fp16") to the bundle at `bundle_dir`; returns the new bundle.json.

    provider "auto" proves CUDA parity where a GPU is present, "cpu" never, "cuda" insists on it.
    Raises BuildError when a check fails (the bundle is left as it was)."""
    from service.engine.bundle import V2_FORMAT_VERSION, load_bundle
    from service.engine.runtime import gpu_present

    if name != VARIANT:
        raise BuildError(f"add-variant knows only {VARIANT!r} (the CUDA variant), not {name!r}")
    bundle_dir = Path(bundle_dir)
    meta = load_bundle(bundle_dir).meta  # every hash checked before anything is derived from it
    use_cuda = provider == "cuda" or (provider == "auto" and gpu_present())
    if provider == "cuda" and not gpu_present():
        raise BuildError("--provider cuda: no GPU with ONNX Runtime's CUDA provider here")
    work = bundle_dir.with_name(bundle_dir.name + ".partial")
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(bundle_dir, work)
    try:
        meta = _write_graphs(work, meta, log)
        meta["format_version"] = max(int(meta["format_version"]), V2_FORMAT_VERSION)
        write_manifest(work, meta)
        checks = check_fp16(work, threads, log)
        if use_cuda:
            checks["cuda"] = cuda_parity(work, threads, log)
        else:
            checks["cuda"] = {"proven": False, "reason": "no GPU here"}
        failures = checks_failures(checks)
        if failures:
            raise BuildError(f"fp16 variant failed ({work} kept for inspection): " + "; ".join(failures))
        del meta["variants"][TWIN]
        (work / TWIN_FILE).unlink()
        meta.setdefault("parity", {})["fp16"] = checks
        meta["default_variant"] = {**meta["default_variant"], "cuda": VARIANT}
        meta.get("omitted_variants", {}).pop(VARIANT, None)
        if "omitted_variants" in meta and not meta["omitted_variants"]:
            del meta["omitted_variants"]
        write_manifest(work, meta)
        load_bundle(work)
    except BaseException:
        if work.exists() and not (work / "bundle.json").is_file():
            shutil.rmtree(work)
        raise
    shutil.rmtree(bundle_dir)
    work.rename(bundle_dir)
    size = sum((bundle_dir / f).stat().st_size for f in FILES.values())
    files = ", ".join(FILES.values())
    log(f"[add-variant] fp16 written to {bundle_dir}: {size / 1e6:.1f} MB ({files}); default_variant.cuda = fp16")
    if not use_cuda:
        log("[add-variant] CUDA parity is still to be proven: run attnserve-gpu-check (or add-variant) on a machine with a GPU")
    return meta


def _write_graphs(work: Path, meta: dict, log) -> dict:
    """The fp16 encoder, the v2 float32 twin and its fp16 conversion, as variants of `meta` (returned)."""
    from export.graphs.v2 import V2_FALLBACK, write_decoder_v2
    from export.graphs.variants import convert_fp16
    from training.weights import load_bundle_weights

    config, state = load_bundle_weights(work)
    fp32 = meta["variants"]["fp32"]
    if fp32.get("kv_cache", "concat") != "concat":
        raise BuildError(f"{work}: variant fp32 is not the v1 graph the weights are read from")
    for old in {meta["variants"].get(VARIANT, {}).get(g) for g in ("encoder", "decoder")} - {None, *FILES.values()}:
        if old not in {v[g] for k, v in meta["variants"].items() if k != VARIANT for g in ("encoder", "decoder")}:
            (work / old).unlink(missing_ok=True)  # an fp16 v1 decoder this replaces
    built = write_decoder_v2(config, state, work / TWIN_FILE)
    log(f"[add-variant] {TWIN_FILE}: {built['nodes']} nodes, from the weights of {fp32['decoder']}")
    convert_fp16(work / fp32["encoder"], work / FILES["encoder"])
    convert_fp16(work / TWIN_FILE, work / FILES["decoder"])
    log(f"[add-variant] {FILES['encoder']}, {FILES['decoder']} (float16)")
    common = {"kv_cache": "in_place", "fallback": V2_FALLBACK}
    meta["variants"][VARIANT] = {**FILES, **common, "precision": PRECISION}
    meta["variants"][TWIN] = {"encoder": fp32["encoder"], "decoder": TWIN_FILE, **common}
    meta["io"]["decoder_v2"] = graph_io(work / TWIN_FILE)  # the same names in every v2 variant
    return meta


def graph_structure(path: Path) -> dict:
    """What makes the fp16 decoder the CUDA v2 one: its attention operators, its cache and logits types."""
    import onnx

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


def check_fp16(work: Path, threads: int | None, log) -> dict:
    """The checks a CPU can make: the fp16 graph's structure, the float32 twin through the engine against the
    v1 reference (exact, alone and batched), the fp16 logits against fp32 on the CPU."""
    from export.checks.variant_parity import fp16_v2_check, v2_parity
    from service.engine.bundle import BundleError, load_bundle
    from service.engine.engine import DecodingOptions, Engine

    bundle = load_bundle(work)
    corpus = json.loads((work / bundle.meta.get("parity_corpus", PARITY_CORPUS)).read_text())
    out: dict = {"structure": graph_structure(work / FILES["decoder"])}
    log(f"[add-variant] structure: {out['structure']}")
    try:
        twin = v2_parity(Engine(bundle, variant=TWIN, provider="cpu", threads=threads), corpus, exact=True)
    except BundleError as e:  # an ONNX Runtime older than the v2 CPU kernels (the GPU wheel): said, not fatal
        twin = {"skipped": str(e), "failures": []}
    out["fp32_twin"] = twin
    log(f"[add-variant] fp32 twin against the v1 reference: {twin}")
    try:
        # how far fp16 logits move from fp32 (reported: what decides is whether greedy answers change, below)
        out["fp16_logits_on_cpu"] = fp16_v2_check(bundle, threads)
        engine = Engine(bundle, variant=VARIANT, provider="cpu", threads=threads)
        res = engine.generate(corpus["source_ids"], DecodingOptions(max_new_tokens=engine.max_target_len), batch_size=32)
        got = [r.token_ids for r in res]
        out["fp16_greedy_on_cpu"] = agreement(bundle, corpus["source_ids"], corpus["greedy"], got, threads)
    except Exception as e:  # an ONNX Runtime whose CPU kernels lack float16 attention: CUDA is the variant's device
        out["fp16_greedy_on_cpu"] = {"skipped": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}", "failures": []}
    log(f"[add-variant] fp16 on the CPU: { ({k: v for k, v in out['fp16_greedy_on_cpu'].items() if k != 'differences'}) }")
    return out


def checks_failures(checks: dict) -> list[str]:
    failures = []
    if not checks["structure"]["ok"]:
        failures.append(f"graph structure: {checks['structure']}")
    failures += checks["fp32_twin"].get("failures", [])
    failures += [f"fp16 on the CPU: {f}" for f in checks["fp16_greedy_on_cpu"].get("failures", [])]
    cuda = checks.get("cuda", {})
    if cuda.get("proven") is False and "reason" not in cuda:
        failures += cuda.get("failures", ["CUDA parity failed"])
    return failures


def cuda_parity(bundle_dir: Path, threads: int | None = None, log=print, variant: str = VARIANT) -> dict:
    """Greedy through the engine on CUDA against the fp32 reference recorded in the parity corpus: the
    agreement, and for each difference how near a tie it was under the fp32 graphs (`near_ties`)."""
    from service.engine.bundle import load_bundle
    from service.engine.engine import DecodingOptions, Engine

    bundle = load_bundle(bundle_dir)
    corpus = json.loads((Path(bundle_dir) / bundle.meta.get("parity_corpus", PARITY_CORPUS)).read_text())
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
    import onnxruntime as ort

    from service.engine.names import (
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
    from service.engine.runtime import session_options

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
