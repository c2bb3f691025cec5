"""The v2 decoders (export/graphs/v2.py) in a bundle: written for its int8 (and fp16) variants, the int8 one
quantized with scales calibrated on training pairs, the v1 decoders they replace deleted, bundle.json's fields
updated (`build`, `requantize`; `add-variant` writes the fp16 one alone)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from attnserve.export.graphs.encoder_simplify import op_counts
from attnserve.export.graphs.format import graph_io
from attnserve.export.graphs.v2 import DISABLED_OPTIMIZERS, write_decoder_v2
from attnserve.export.graphs.variants import convert_fp16, quantize_int8
from attnserve.export.pipeline.calibration import calibrated_amax_v2
from attnserve.service.engine.bundle import V2_FORMAT_VERSION
from attnserve.service.engine.runtime import session_options

V2_INT8_QUANTIZATION = (
    "int8 static: activations quantized with fixed scales (max |x| of each activation over training-split pairs, read "
    "from the float32 v2 graph; symmetric uint8 around 128, a ReLU's output uint8 from 0), MatMul weights int8 per output "
    "channel in [-63, 63] (no uint8 x int8 saturation without VNNI), one MatMulIntegerToFloat per projection (Q, K and V "
    "fused) with the bias inside; attention in GroupQueryAttention and MultiHeadAttention (float32, cross keys padded to "
    "a multiple of 4), so a row's outputs are bitwise the same whatever else is in the batch"
)
V2_DECODER_FILES = {"fp32": "decoder.v2.onnx", "int8": "decoder.v2.int8.onnx", "fp16": "decoder.v2.fp16.onnx"}
V2_FALLBACK = "fp32"  # the v1 variant `--variant auto` serves on a runtime without V2_CONTRIB_OPS


def optimized_node_count(path: Path, threads: int = 1) -> dict[str, int]:
    """Nodes of the graph at `path` after ONNX Runtime's load-time optimisation, by operator, and "total"."""
    with tempfile.TemporaryDirectory() as tmp:
        so = session_options(threads)
        so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS)
        return op_counts(onnx.load(so.optimized_model_filepath, load_external_data=False))


def write_v2_variants(
    bundle_dir: Path,
    config: dict,
    state: dict[str, np.ndarray],
    encoders: dict[str, str],
    src_tok,
    tgt_tok,
    pairs: list[tuple[str, str]],
    fp16: bool = False,
    keep_fp32: bool = False,
    log=print,
) -> dict[str, dict]:
    """Write the v2 decoders into `bundle_dir` and return their bundle.json `variants` entries.

    `encoders` names each precision's encoder file already in the bundle ("fp32", "int8", and "fp16" when
    `fp16`): v2 changes only the decoder. The int8 decoder's activation scales are calibrated on `pairs` from
    the float32 v2 graph (`calibrated_amax_v2`, beside v1's `calibrated_amax` in export/pipeline/calibration.py). The float32 v2
    decoder is the fp16 one's source and CPU twin: kept as variant "fp32-v2" only with `keep_fp32`."""
    bundle_dir = Path(bundle_dir)
    fp32_path = bundle_dir / V2_DECODER_FILES["fp32"]
    built = write_decoder_v2(config, state, fp32_path)
    log(f"[v2] {fp32_path.name}: {built['nodes']} nodes (GroupQueryAttention over an in-place cache)")
    amax = calibrated_amax_v2(bundle_dir / encoders["fp32"], fp32_path, src_tok, tgt_tok, config, pairs)
    int8_path = bundle_dir / V2_DECODER_FILES["int8"]
    counts = quantize_int8(fp32_path, int8_path, exact_attention=False, activation_amax=amax)
    optimized = optimized_node_count(int8_path)
    log(f"[v2] {int8_path.name}: {counts['nodes']} nodes, {optimized['total']} after ONNX Runtime's optimisation")
    common = {"kv_cache": "in_place", "fallback": V2_FALLBACK}
    variants = {
        "int8": {
            "encoder": encoders["int8"],
            "decoder": int8_path.name,
            **common,
            "quantization": V2_INT8_QUANTIZATION,
            "calibration": {"split": "train", "pairs": len(pairs)},
            "nodes": {"graph": counts["nodes"], "optimized": optimized},
        }
    }
    if fp16:
        fp16_path = bundle_dir / V2_DECODER_FILES["fp16"]
        convert_fp16(fp32_path, fp16_path)
        variants["fp16"] = {"encoder": encoders["fp16"], "decoder": fp16_path.name, **common}
    if keep_fp32:
        variants["fp32-v2"] = {"encoder": encoders["fp32"], "decoder": fp32_path.name, **common}
    else:
        fp32_path.unlink()
    return variants


def add_v2_to_bundle(
    bundle_dir: Path,
    meta: dict,
    state: dict[str, np.ndarray],
    src_tok,
    tgt_tok,
    pairs: list[tuple[str, str]],
    log=print,
) -> dict:
    """Make the bundle being built in `bundle_dir` (its bundle.json fields in `meta`, not yet written) serve v2:
    its int8 variant (and fp16, when it has one) becomes the v2 decoder over the variant's own encoder, the
    v1 decoders they replace are deleted, fp32 stays v1 (the reference, the explain graph's base, the fallback).
    Returns the updated `meta` (`format_version` 2, `io.decoder_v2`, `kv_cache` on every variant)."""
    variants = meta["variants"]
    encoders = {name: v["encoder"] for name, v in variants.items()}
    v2 = write_v2_variants(bundle_dir, meta["config"], state, encoders, src_tok, tgt_tok, pairs, fp16="fp16" in variants, log=log)
    for name, entry in v2.items():
        replaced = variants.get(name, {}).get("decoder")
        if replaced and replaced != entry["decoder"] and (bundle_dir / replaced).is_file():
            (bundle_dir / replaced).unlink()
        kept = {k: v for k, v in variants.get(name, {}).items() if k in ("precision",)}
        variants[name] = {**entry, **kept}
    for entry in variants.values():
        entry.setdefault("kv_cache", "concat")
    meta["format_version"] = V2_FORMAT_VERSION
    meta["io"]["decoder_v2"] = graph_io(bundle_dir / v2["int8"]["decoder"])
    return meta
