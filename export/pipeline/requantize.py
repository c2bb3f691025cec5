"""`attnserve-export requantize BUNDLE`: a bundle's int8 graphs rewritten from its own fp32 graphs, and the int8
gate run again (no run directory, no torch for the graphs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.export.checks.variant_parity import v2_parity
from attnserve.export.errors import BuildError
from attnserve.export.pipeline.calibration import training_pairs, write_int8
from attnserve.export.pipeline.int8_gate import int8_gate
from attnserve.export.pipeline.manifest import BUNDLE_JSON, PARITY_CORPUS, VARIANT_FILES, update_manifest, write_manifest
from attnserve.export.pipeline.simplify_encoder import simplify_bundle_encoders
from attnserve.export.pipeline.v2 import add_v2_to_bundle
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import Engine
from attnserve.training.weights import load_bundle_weights


def requantize(
    bundle_dir: Path, eval_limit: int | None = None, threads: int | None = None, log=print, dataset: str | None = None
) -> dict:
    """Rewrite a bundle's int8 graphs from its own fp32 graphs (`quantize_int8`) and re-run the int8
    gate; returns the new bundle.json. No run directory needed: how an existing bundle gets a new
    quantization, and how a v1 bundle gets its v2 decoders (export/graphs/v2.py, from the weights its fp32
    graphs hold: training/weights.py), its int8 (and fp16) variants becoming v2. `eval_limit` defaults to the
    dev size the bundle recorded. Works in
    `BUNDLE.partial` and replaces the bundle only when everything passed. A test-split figure
    measured on the old int8 is dropped (re-run `attnserve-eval BUNDLE --split test --record`)."""
    bundle_dir = Path(bundle_dir)
    meta = load_bundle(bundle_dir).meta  # every hash checked before anything is derived from it
    if "int8" not in meta["variants"]:
        raise BuildError(f"{bundle_dir}: the bundle has no int8 variant to rewrite")
    train_cfg = {"dataset": dataset or meta.get("dataset"), "strip_stress": meta.get("strip_stress", False)}
    pairs = training_pairs(train_cfg["dataset"], bool(train_cfg["strip_stress"]))  # a missing dataset stops us here
    work = bundle_dir.with_name(bundle_dir.name + ".partial")
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(bundle_dir, work)
    fp32, int8 = meta["variants"]["fp32"], meta["variants"]["int8"]
    log(f"[requantize] int8 graphs, activation scales calibrated on {len(pairs)} training pairs")
    tokenizers = [Tokenizer.from_file(str(work / meta["tokenizers"][side])) for side in ("source", "target")]
    v1_int8 = {"encoder": int8["encoder"], "decoder": VARIANT_FILES["int8"]["decoder"]}  # the encoder's scales
    write_int8(work, fp32, v1_int8, *tokenizers, meta["config"], pairs, log)
    meta["variants"]["int8"] = v1_int8
    _, state = load_bundle_weights(work)
    meta = add_v2_to_bundle(work, meta, state, *tokenizers, pairs, log)
    write_manifest(work, meta)
    simplify_bundle_encoders(work, log, fused_attention=True)  # the new int8 encoder as `build` leaves one
    meta = json.loads((work / BUNDLE_JSON).read_text())
    corpus = json.loads((work / meta.get("parity_corpus", PARITY_CORPUS)).read_text())
    engine = Engine(load_bundle(work), variant="int8", provider="cpu", threads=threads)
    v2 = v2_parity(engine, corpus, exact=False)
    if v2["failures"]:
        raise BuildError(f"v2 int8 failed verification ({work} kept for inspection): " + "; ".join(v2["failures"]))
    agreement = {"greedy_agreement_with_fp32_reference_pct": v2["greedy_agreement_with_reference_pct"]}
    parity = {**meta.get("parity", {}), "int8": agreement}
    parity["v2_int8"] = {k: v for k, v in v2.items() if k != "failures"}
    limit = eval_limit if eval_limit is not None else meta.get("eval", {}).get("dev", {}).get("words", 2000)
    log(f"[requantize] dev evaluation of fp32 and int8 (limit {limit}), speed and batch invariance")
    gate = int8_gate(work, train_cfg, limit, threads, log)
    evals = {k: v for k, v in meta.get("eval", {}).items() if not (k != "dev" and v.get("variant") == "int8")}
    if evals.keys() != meta.get("eval", {}).keys():
        log("[requantize] test figures of the old int8 dropped: run attnserve-eval BUNDLE --split test --record")
    meta = update_manifest(
        work,
        parity=parity,
        eval={**evals, "dev": gate["fp32_dev"]},
        default_variant={**meta["default_variant"], "cpu": "int8" if gate["int8_is_cpu_default"] else "fp32"},
        int8_gate=gate["decision"],
        variants={
            **meta["variants"],
            "int8": {**meta["variants"]["int8"], "eval": {"dev": gate["int8_dev"]}, "speed": gate["speed"]},
        },
    )
    load_bundle(work)
    shutil.rmtree(bundle_dir)
    work.rename(bundle_dir)
    log(f"[requantize] {bundle_dir} rewritten (default cpu variant: {meta['default_variant']['cpu']})")
    return meta
