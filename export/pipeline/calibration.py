"""Calibration of the int8 variant's fixed activation scales: the largest |x| each quantized activation
takes on training-split pairs, read from the float32 graphs.

Fixed scales are what make this int8 batch-invariant: a constant cannot depend on the other rows of a
batch, and it costs one QuantizeLinear per activation where a scale computed per row costs four nodes
(benchmarks/HISTORY.md, "Batch-invariant int8"). Each pair is run alone (B = 1, no padding), the decoder
teacher-forced over its whole reference in one call from an empty cache, so every value seen is one a
served row computes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from tokenizers import Tokenizer
from tqdm import tqdm

from attnserve.export.checks.invariance import cpu_session, cross_feeds, decoder_feeds, self_attention_inputs
from attnserve.export.checks.steps import StepRunner, encode_alone, v2_session
from attnserve.export.graphs.variants import calibrate_amax, quantize_int8, quantized_inputs
from attnserve.service.engine.names import ATTENTION_MASK, INPUT_IDS
from attnserve.training.data import load_examples

CALIBRATION_PAIRS = 1000  # training-split pairs, spread evenly over the split


def training_pairs(dataset: str, strip_stress: bool, pairs: int = CALIBRATION_PAIRS) -> list[tuple[str, str]]:
    """`pairs` (source, first reference) of the training split, evenly spread (never dev or test)."""
    examples = load_examples(dataset, "train", strip_stress)
    return [(e.source, e.targets[0]) for e in examples[:: max(1, len(examples) // pairs)][:pairs]]


def calibrated_amax(
    encoder: Path, decoder: Path, src_tok: Tokenizer, tgt_tok: Tokenizer, cfg: dict, pairs: list[tuple[str, str]]
) -> dict[str, dict[str, float]]:
    """{"encoder": {activation: max |x|}, "decoder": {...}} of the float32 graphs over `pairs`."""
    session = cpu_session(encoder)
    enc_names = [o.name for o in session.get_outputs()]
    self_in = self_attention_inputs(int(cfg["n_decoder_layers"]))
    enc_feeds, dec_feeds = [], []
    for source, target in tqdm(pairs, desc="int8 calibration", unit="pair", leave=False):
        src = src_tok.encode(source, add_special_tokens=False).ids[: int(cfg["max_source_len"])] or [int(cfg["unk_id"])]
        tgt = tgt_tok.encode(target, add_special_tokens=False).ids[: int(cfg["max_target_len"]) - 1]
        x = np.asarray([src], np.int64)
        enc_feeds.append({INPUT_IDS: x, ATTENTION_MASK: np.ones_like(x)})
        cross = cross_feeds(dict(zip(enc_names, session.run(None, enc_feeds[-1]))))
        ids = np.asarray([[int(cfg["bos_id"]), *tgt]], np.int64)
        positions = np.arange(ids.shape[1], dtype=np.int64)[None]
        dec_feeds.append(decoder_feeds(cross, ids, positions, np.ones_like(ids), None, self_in))
    return {"encoder": calibrate_amax(encoder, enc_feeds), "decoder": calibrate_amax(decoder, dec_feeds)}


def write_int8(
    bundle_dir: Path,
    fp32: dict[str, str],
    int8: dict[str, str],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    cfg: dict,
    pairs: list[tuple[str, str]],
    log=print,
) -> dict:
    """The int8 graphs (`int8`'s file names) from the float32 ones in `bundle_dir`, calibrated on `pairs`;
    returns what bundle.json records of the calibration."""
    if not pairs:
        raise ValueError("int8 calibration needs at least one training pair")
    amax = calibrated_amax(bundle_dir / fp32["encoder"], bundle_dir / fp32["decoder"], src_tok, tgt_tok, cfg, pairs)
    for graph in ("encoder", "decoder"):
        counts = quantize_int8(bundle_dir / fp32[graph], bundle_dir / int8[graph], activation_amax=amax[graph])
        log(f"[int8] {int8[graph]}: {counts}")
    return {"split": "train", "pairs": len(pairs)}


def calibrated_amax_v2(
    encoder: Path, decoder_v2: Path, src_tok: Tokenizer, tgt_tok: Tokenizer, cfg: dict, pairs: list[tuple[str, str]]
) -> dict[str, float]:
    """max |x| of every activation the int8 quantizer quantizes in the float32 v2 decoder, over `pairs`
    teacher-forced one step at a time (each pair alone, as a served row computes it)."""
    n = int(cfg["n_decoder_layers"])
    m = onnx.load(str(decoder_v2))
    names = list(quantized_inputs(m.graph))
    m.graph.output.extend(onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in names)
    session = v2_session(m.SerializeToString())
    enc = v2_session(encoder)
    amax = dict.fromkeys(names, 0.0)
    runner = StepRunner(session, n, 1, int(cfg["max_target_len"]), names)
    for source, target in tqdm(pairs, desc="int8 calibration (v2)", unit="pair", leave=False):
        src = src_tok.encode(source, add_special_tokens=False).ids[: int(cfg["max_source_len"])] or [int(cfg["unk_id"])]
        tgt = tgt_tok.encode(target, add_special_tokens=False).ids[: int(cfg["max_target_len"]) - 1]
        runner.set_cross(*encode_alone(enc, src, n))
        for p, token in enumerate([int(cfg["bos_id"]), *tgt]):
            outs = runner.step(np.array([token]), np.array([p]))
            for x, v in zip(names, outs[1:]):
                amax[x] = max(amax[x], float(np.abs(v).max(initial=0.0)))
    return amax
