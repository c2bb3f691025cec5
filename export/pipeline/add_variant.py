"""`attnserve-export add-variant BUNDLE fp16`: the CUDA variant added to a bundle from its own fp32 graphs.

No run directory and no PyTorch: the weights are read back from the bundle's v1 fp32 graphs
(training/weights.py, the mapping `requantize` and `attnserve-train --init-from` use), the v2 decoder is
written from them (export/graphs/v2.py) and converted to float16 (export/graphs/variants.py). The variant
shares the fp32 variant's encoder (no second copy of the encoder's weights: the default bundle fits its budget
with it): the encoder runs once per request, in float32, and its cross-attention K/V are rounded to float16 as
they enter the batch's buffers (service/engine/slots.py), what an fp16 encoder's outputs would hold with one
rounding less. The variant's v1 fallback is the bundle's fp32 variant, which every bundle has.

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

from attnserve.export.checks.fp16 import agreement, cuda_parity, graph_structure
from attnserve.export.checks.variant_parity import fp16_v2_check, v2_parity
from attnserve.export.errors import BuildError
from attnserve.export.graphs.format import graph_io
from attnserve.export.graphs.v2 import write_decoder_v2
from attnserve.export.graphs.variants import convert_fp16
from attnserve.export.pipeline.manifest import PARITY_CORPUS, write_manifest
from attnserve.export.pipeline.v2 import V2_FALLBACK
from attnserve.service.engine.bundle import V2_FORMAT_VERSION, BundleError, load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.runtime import gpu_present
from attnserve.training.weights import load_bundle_weights

VARIANT = "fp16"
FILES = {"decoder": "decoder.v2.fp16.onnx"}  # written here; the encoder is the fp32 variant's
TWIN = "fp32-v2"  # the float32 v2 decoder checked on the CPU, then deleted
TWIN_FILE = "decoder.v2.onnx"
PRECISION = (
    "float16 v2 decoder (GroupQueryAttention over a float16 in-place cache, MultiHeadAttention over float16 cross K/V); "
    "LayerNormalization, Softmax and the logits projection in float32; encoder_attention_bias and logits float32 at the "
    "graph boundary; the fp32 variant's encoder, its cross K/V rounded to float16 as they enter the cache"
)


def add_variant(
    bundle_dir: Path, name: str, provider: str = "auto", threads: int | None = None, log: Callable[[str], None] = print
) -> dict:
    """Add variant `name` (only "fp16") to the bundle at `bundle_dir`; returns the new bundle.json.

    provider "auto" proves CUDA parity where a GPU is present, "cpu" never, "cuda" insists on it.
    Raises BuildError when a check fails (the bundle is left as it was)."""
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
    """The v2 float32 twin and its fp16 conversion, as variants of `meta` (returned), both over the fp32 encoder."""
    config, state = load_bundle_weights(work)
    fp32 = meta["variants"]["fp32"]
    if fp32.get("kv_cache", "concat") != "concat":
        raise BuildError(f"{work}: variant fp32 is not the v1 graph the weights are read from")
    for old in {meta["variants"].get(VARIANT, {}).get(g) for g in ("encoder", "decoder")} - {None, *FILES.values()}:
        if old not in {v[g] for k, v in meta["variants"].items() if k != VARIANT for g in ("encoder", "decoder")}:
            (work / old).unlink(missing_ok=True)  # an fp16 encoder or v1 decoder this replaces
    built = write_decoder_v2(config, state, work / TWIN_FILE)
    log(f"[add-variant] {TWIN_FILE}: {built['nodes']} nodes, from the weights of {fp32['decoder']}")
    convert_fp16(work / TWIN_FILE, work / FILES["decoder"])
    log(f"[add-variant] {FILES['decoder']} (float16), over {fp32['encoder']} (shared with fp32)")
    common = {"kv_cache": "in_place", "fallback": V2_FALLBACK}
    meta["variants"][VARIANT] = {"encoder": fp32["encoder"], **FILES, **common, "precision": PRECISION}
    meta["variants"][TWIN] = {"encoder": fp32["encoder"], "decoder": TWIN_FILE, **common}
    meta["io"]["decoder_v2"] = graph_io(work / TWIN_FILE)  # the same names in every v2 variant
    return meta


def check_fp16(work: Path, threads: int | None, log) -> dict:
    """The checks a CPU can make: the fp16 graph's structure, the float32 twin through the engine against the
    v1 reference (exact, alone and batched), the fp16 logits against fp32 on the CPU."""
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
