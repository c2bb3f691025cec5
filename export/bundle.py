"""`attnserve-export build`: run directory (Contract 1) -> model bundle (Contract 2).

Steps: export fp32 graphs, derive int8 and fp16 variants, copy the tokenizers,
record the parity corpus, write bundle.json with the sha256 of every file,
run the parity suite (verify.py) and the dev-split evaluation, apply the int8
gate, and write the figures into bundle.json. The bundle is built in
`BUNDLE.partial` and moved into place only when every check passed, so a
failed build never leaves a half-made bundle where the service looks.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from pathlib import Path

import onnx
import onnxruntime
import torch
from tokenizers import Tokenizer

from export.calibration import training_pairs, write_int8
from export.checks.explain import add_explain_graph
from export.context import run_has_context, write_context
from export.errors import BuildError
from export.graphs.format import OPSET, graph_io
from export.graphs.v1 import export_decoder, export_encoder, share_initializers
from export.graphs.v2 import add_v2_to_bundle
from export.graphs.variants import FP16_KEEP_FP32_OPS, FP32_BOUNDARY, INT8_QUANTIZATION, convert_fp16
from export.lexicon import with_fields_after, write_lexicon
from export.manifest import BUNDLE_JSON, PARITY_CORPUS, TOKENIZERS, update_manifest, write_manifest  # noqa: F401 (re-exported)
from service.engine.bundle import FORMAT_VERSION, bounded_length, load_bundle
from training.run import load_model, load_run_tokenizers

SHARED_DECODER_WEIGHTS = "decoder.onnx.data"  # external data of decoder.onnx and decoder.explain.onnx
VARIANT_FILES = {
    "fp32": {"encoder": "encoder.onnx", "decoder": "decoder.onnx"},
    "int8": {"encoder": "encoder.int8.onnx", "decoder": "decoder.int8.onnx"},
    "fp16": {"encoder": "encoder.fp16.onnx", "decoder": "decoder.fp16.onnx"},
}
INT8_MAX_WER_LOSS = 0.5  # percentage points of dev WER int8 may lose against fp32
INT8_MIN_SPEEDUP = 1.05  # and it must be at least this much faster, at batch 1 and at batch 32
# and a row's outputs must be the same alone and in padded batches of 32 (export/invariance.py): exactly,
# since any difference, however small, can flip an int8 rounding step and grow to 1e-2 in the logits
INT8_MAX_INVARIANCE_DIFF = 0.0
LENGTH_MARGIN = 3  # tokens beyond the longest training target of the same source length


def learned_length_bound(train_cfg: dict, src_tok, tgt_tok, max_source_len: int, max_target_len: int) -> dict:
    """bundle.json's `length_bound`: per source length in tokens, the longest target (tokens, without
    the end token) among the training pairs of that source length (a length never seen takes the
    nearest shorter one's); the engine stops a request at that plus `margin`, so a model that loops
    stops near the longest real answer, not at max_target_len."""
    from training.data import load_examples

    examples = load_examples(train_cfg.get("dataset", "cmudict"), "train", bool(train_cfg.get("strip_stress", False)))
    longest = [0] * (max_source_len + 1)
    sources = [e.source for e in examples]
    targets = [e.targets for e in examples]
    for src_enc, refs in zip(src_tok.encode_batch(sources, add_special_tokens=False), targets):
        s = min(len(src_enc.ids), max_source_len)
        for enc in tgt_tok.encode_batch(refs, add_special_tokens=False):
            longest[s] = max(longest[s], min(len(enc.ids), max_target_len))
    for s in range(1, len(longest)):  # a length never seen in training takes the nearest shorter one's
        if not longest[s]:
            longest[s] = longest[s - 1]
    return {"by_source_len": longest, "margin": LENGTH_MARGIN, "pairs": sum(len(t) for t in targets)}


def run_task(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def build(
    run_dir: Path,
    out_dir: Path,
    model_id: str | None = None,
    eval_limit: int = 2000,
    parity_limit: int = 256,
    threads: int | None = None,
    log=print,
    dataset: str | None = None,
    fp16: bool = True,
    lexicon: bool = False,
    word_level_source: bool | None = None,
) -> dict:
    """Build and verify a bundle; returns its bundle.json. Raises BuildError on any failed check.

    `dataset` overrides the run's dataset for the parity corpus and the dev evaluation (a TSV
    that has moved since training, say). `fp16=False` leaves the fp16 variant (a CUDA extra) out.
    `lexicon=True` ships the training dictionary as the bundle's lexicon (export/lexicon.py); a run directory
    holding a context component (`context.json.gz`, export/context.py) gives the bundle it too.
    `word_level_source` (default: True for G2P) declares that the model reads one word.

    decoder.onnx and decoder.explain.onnx keep their weights in one file, decoder.onnx.data:
    the explain graph is a second trace of the same decoder, so this halves the decoder's disk size."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if (out_dir.exists() and any(out_dir.iterdir())) and not (out_dir / BUNDLE_JSON).is_file():
        raise BuildError(f"{out_dir} exists and is not a bundle: choose an empty or new --out")
    t_start = time.perf_counter()
    log = elapsed_log(log, t_start)
    model = load_model(run_dir)
    src_tok, tgt_tok = load_run_tokenizers(run_dir)
    train_cfg, sources = build_inputs(run_dir, dataset, parity_limit)
    cfg = model.cfg
    work = out_dir.with_name(out_dir.name + ".partial")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)

    log(f"[export] graphs (opset {OPSET}) from {run_dir}")
    pairs, calibration = export_graphs(model, work, src_tok, tgt_tok, train_cfg, fp16, log)
    length_bound = learned_length_bound(train_cfg, src_tok, tgt_tok, cfg.max_source_len, cfg.max_target_len)
    log(f"[export] length bound from the training targets: {length_bound['by_source_len'][:16]}... + {LENGTH_MARGIN}")
    write_parity_corpus(model, work, src_tok, sources, length_bound, log)
    model_id = model_id or out_dir.resolve().name
    meta = bundle_meta(model, work, model_id, calibration, length_bound, train_cfg, word_level_source, fp16)
    if lexicon:
        meta = with_fields_after(
            meta,
            "word_level_source",
            {"lexicon": write_lexicon(work, meta["dataset"], meta["strip_stress"], src_tok, tgt_tok, log)},
        )
    if run_has_context(run_dir):  # the run's heteronym chooser (attnserve-train context)
        lexicon_file = work / meta["lexicon"]["file"] if "lexicon" in meta else None
        meta = with_fields_after(meta, "lexicon", {"context": write_context(work, run_dir, lexicon_file, log)})
    log("[export] v2 decoders (fused, in-place cache) for the int8 and fp16 variants")
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    meta = add_v2_to_bundle(work, meta, state, src_tok, tgt_tok, pairs, log)
    add_explain_sharing_weights(model, work, meta, log)
    write_manifest(work, meta)

    f16 = check_fp16(work, meta, threads, log)
    report = parity_suite(work, model, f16, threads, log)
    meta, default_cpu = apply_int8_gate(work, meta, report, train_cfg, eval_limit, threads, log)
    load_bundle(work)  # the service's own loader must accept what we wrote
    if out_dir.exists():
        shutil.rmtree(out_dir)
    work.rename(out_dir)
    log(f"[export] bundle written to {out_dir} in {time.perf_counter() - t_start:.0f} s (default cpu variant: {default_cpu})")
    return meta


def elapsed_log(log, t_start: float):
    """`log` with how long the build has run before every line: where the time goes."""

    def timed(msg: str) -> None:
        log(f"{time.perf_counter() - t_start:6.1f}s {msg}")

    return timed


def build_inputs(run_dir: Path, dataset: str | None, parity_limit: int) -> tuple[dict, list]:
    """The run's task settings (`dataset` overriding its dataset) and the parity corpus's inputs; a dataset
    that gives too few inputs stops the build before anything is written."""
    from export.checks.corpus import default_corpus

    train_cfg = run_task(run_dir)
    if dataset:
        train_cfg["dataset"] = dataset
    sources = default_corpus(train_cfg, parity_limit)
    if len(sources) < min(parity_limit, 200):
        raise BuildError(
            f"dataset {train_cfg.get('dataset')!r} gives {len(sources)} inputs for the parity corpus (need 200): "
            "is it installed/readable here? pass --dataset"
        )
    return train_cfg, sources


def export_graphs(model, work: Path, src_tok, tgt_tok, train_cfg: dict, fp16: bool, log) -> tuple[list, dict]:
    """The fp32 graphs, int8 calibrated on the training pairs, fp16 (unless left out) and the tokenizers;
    returns the calibration pairs and the int8 calibration record."""
    export_encoder(model, work / VARIANT_FILES["fp32"]["encoder"])
    export_decoder(model, work / VARIANT_FILES["fp32"]["decoder"])
    pairs = training_pairs(train_cfg["dataset"], bool(train_cfg.get("strip_stress", False)))
    log(f"[export] int8 graphs, activation scales calibrated on {len(pairs)} training pairs")
    config = model.cfg.to_dict()
    calibration = write_int8(work, VARIANT_FILES["fp32"], VARIANT_FILES["int8"], src_tok, tgt_tok, config, pairs, log)
    if fp16:
        for graph in ("encoder", "decoder"):
            convert_fp16(work / VARIANT_FILES["fp32"][graph], work / VARIANT_FILES["fp16"][graph])
    src_tok.save(str(work / TOKENIZERS["source"]))
    tgt_tok.save(str(work / TOKENIZERS["target"]))
    return pairs, calibration


def write_parity_corpus(model, work: Path, src_tok, sources: list, length_bound: dict, log) -> None:
    """PyTorch's outputs for the parity inputs, each stopped at the learned length bound: what verify.py compares to."""
    from export.checks.corpus import make_parity_corpus

    bound = functools.partial(bounded_length, length_bound, model.cfg.max_target_len)
    log(f"[export] PyTorch reference outputs for the parity corpus ({len(sources)} inputs)")
    corpus = make_parity_corpus(model, src_tok, sources, bound)
    (work / PARITY_CORPUS).write_text(json.dumps(corpus) + "\n")


def bundle_meta(
    model, work: Path, model_id: str, calibration: dict, length_bound: dict, train_cfg: dict, word_level_source, fp16: bool
) -> dict:
    """bundle.json before the checks: the model, its graphs' I/O, the v1 variants, the task; parity and eval empty."""
    cfg = model.cfg
    meta = {
        "format_version": FORMAT_VERSION,
        "model_id": model_id,
        "config": cfg.to_dict(),
        "special_ids": {"pad": cfg.pad_id, "bos": cfg.bos_id, "eos": cfg.eos_id, "unk": cfg.unk_id},
        "max_source_len": cfg.max_source_len,
        "max_target_len": cfg.max_target_len,
        "opset": OPSET,
        "io": {g: graph_io(work / VARIANT_FILES["fp32"][g]) for g in ("encoder", "decoder")},
        "decoder_extra_outputs": ["next_token"],  # [B] int64: in-graph argmax of logits
        "variants": {
            "fp32": dict(VARIANT_FILES["fp32"]),
            "int8": {**VARIANT_FILES["int8"], "quantization": INT8_QUANTIZATION, "calibration": calibration},
            "fp16": {
                **VARIANT_FILES["fp16"],
                "precision": f"float16; {', '.join(FP16_KEEP_FP32_OPS)} and the logits projection in float32; "
                f"{', '.join(FP32_BOUNDARY)} float32 at the graph boundary",
            },
        },
        "default_variant": {"cpu": "fp32", "cuda": "fp32"},
        "tokenizers": dict(TOKENIZERS),
        "parity_corpus": PARITY_CORPUS,
        "length_bound": length_bound,
        "task": train_cfg.get("task", "g2p"),
        "dataset": train_cfg.get("dataset"),
        "strip_stress": bool(train_cfg.get("strip_stress", False)),
        "word_level_source": train_cfg.get("task", "g2p") == "g2p" if word_level_source is None else word_level_source,
        "parity": {},
        "eval": {},
        "built_with": {
            "torch": torch.__version__.split("+")[0],
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    }
    if not fp16:
        del meta["variants"]["fp16"]
        meta["omitted_variants"] = {"fp16": "left out at build time (--no-fp16): a smaller, CPU-first bundle"}
    return meta


def add_explain_sharing_weights(model, work: Path, meta: dict, log) -> None:
    """decoder.explain.onnx, its weights moved with decoder.onnx's into one shared file (recorded in `meta`)."""
    log("[export] decoder.explain.onnx (cross-attention outputs for POST /explain)")
    add_explain_graph(model, work, meta, VARIANT_FILES["fp32"]["encoder"])
    shared = share_initializers(
        [work / VARIANT_FILES["fp32"]["decoder"], work / meta["explain"]["decoder"]], work / SHARED_DECODER_WEIGHTS
    )
    meta["shared_weights"] = {
        SHARED_DECODER_WEIGHTS: {"graphs": [VARIANT_FILES["fp32"]["decoder"], meta["explain"]["decoder"]], **shared}
    }
    log(f"[export] {SHARED_DECODER_WEIGHTS}: {shared['tensors']} weights shared by decoder.onnx and decoder.explain.onnx")


def check_fp16(work: Path, meta: dict, threads: int | None, log) -> dict:
    """fp16 against fp32; a variant that fails is dropped from the bundle (and `meta`), not shipped."""
    from export.checks.variant_parity import fp16_check

    f16 = fp16_check(load_bundle(work), threads) if "fp16" in meta["variants"] else {"ok": True}
    if not f16["ok"]:
        # fp16 is an extra for CUDA: a bundle without it still serves everywhere, so drop it
        # rather than ship a variant that failed its check (the figure is kept in bundle.json).
        log(f"[export] WARNING: fp16 differs from fp32 by {f16['max_abs_diff_logits_vs_fp32']:.2e}: fp16 variant dropped")
        for f in {meta["variants"]["fp16"][g] for g in ("encoder", "decoder")}:
            (work / f).unlink()
        del meta["variants"]["fp16"]
        write_manifest(work, meta)
    return f16


def parity_suite(work: Path, model, f16: dict, threads: int | None, log) -> dict:
    """verify.py's parity suite, its figures recorded in bundle.json; any failure stops the build."""
    from export.checks.parity import run_parity

    log("[export] parity suite")
    report = run_parity(work, model=model, threads=threads, log=log)
    if not f16["ok"]:
        report["figures"]["fp16_dropped"] = f16
    update_manifest(work, parity=report["figures"])
    if report["failures"]:
        raise BuildError(f"parity failed ({work} kept for inspection): " + "; ".join(report["failures"]))
    return report


def apply_int8_gate(
    work: Path, meta: dict, report: dict, train_cfg: dict, eval_limit: int, threads: int | None, log
) -> tuple[dict, str]:
    """The dev evaluation and the int8 gate, written into bundle.json with the default variants they choose;
    returns the new bundle.json and the CPU default."""
    log(f"[export] dev evaluation of fp32 and int8 (limit {eval_limit}) and the int8 speed gate")
    gate = int8_gate(work, train_cfg, eval_limit, threads, log)
    default_cpu = "int8" if gate["int8_is_cpu_default"] else "fp32"
    fp16_ok = "fp16" in report["figures"] and report["figures"]["fp16"]["ok"]
    meta = update_manifest(
        work,
        eval={"dev": gate["fp32_dev"]},
        default_variant={"cpu": default_cpu, "cuda": "fp16" if fp16_ok else "fp32"},
        int8_gate=gate["decision"],
        variants={
            **meta["variants"],
            "int8": {**meta["variants"]["int8"], "eval": {"dev": gate["int8_dev"]}, "speed": gate["speed"]},
        },
    )
    return meta, default_cpu


def requantize(
    bundle_dir: Path, eval_limit: int | None = None, threads: int | None = None, log=print, dataset: str | None = None
) -> dict:
    """Rewrite a bundle's int8 graphs from its own fp32 graphs (`quantize_int8`) and re-run the int8
    gate; returns the new bundle.json. No run directory needed: how an existing bundle gets a new
    quantization, and how a v1 bundle gets its v2 decoders (export/fused.py, from the weights its fp32
    graphs hold: training/weights.py), its int8 (and fp16) variants becoming v2. `eval_limit` defaults to the
    dev size the bundle recorded. Works in
    `BUNDLE.partial` and replaces the bundle only when everything passed. A test-split figure
    measured on the old int8 is dropped (re-run `attnserve-eval BUNDLE --split test --record`)."""
    from export.checks.variant_parity import v2_parity
    from service.engine.engine import Engine
    from training.weights import load_bundle_weights

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


def int8_gate(bundle_dir: Path, train_cfg: dict, eval_limit: int, threads: int | None, log=print) -> dict:
    """Dev WER of fp32 and int8 through the engine, their speed at batch 1 and 32, and int8's batch
    invariance on the parity corpus.

    int8 becomes the CPU default only if it loses at most INT8_MAX_WER_LOSS WER points AND is
    at least INT8_MIN_SPEEDUP times faster at both batch sizes (int8 is not always faster for
    small matrices; measure, don't assume) AND a row's outputs do not depend on its batch.
    """
    from export.checks.invariance import ConcatSteps, InPlaceSteps, batch_invariance
    from export.checks.speed import bench_engine_speed
    from service.engine.engine import Engine
    from training.evaluate import evaluate_engine

    bundle = load_bundle(bundle_dir)
    engines = {v: Engine(bundle, variant=v, provider="cpu", threads=threads) for v in ("fp32", "int8")}
    dataset = train_cfg.get("dataset")
    dev = {}
    for v, engine in engines.items():
        strip = bool(train_cfg.get("strip_stress", False))
        dev[v] = evaluate_engine(engine, dataset, "dev", eval_limit or None, strip, bundle.meta["task"])
        dev[v].pop("by_length", None)
        log(f"[export] dev {v}: " + ", ".join(f"{k}={x:.2f}" for k, x in dev[v].items() if isinstance(x, float)))
    speed = bench_engine_speed(engines, dataset, train_cfg.get("strip_stress", False))
    corpus = json.loads((bundle.dir / bundle.meta.get("parity_corpus", PARITY_CORPUS)).read_text())
    enc, dec = bundle.graph_paths("int8")
    cfg = bundle.config
    vocab = int(cfg["tgt_vocab_size"])
    if bundle.kv_cache("int8") == "in_place":
        steps = InPlaceSteps(enc, dec, bundle.n_layers, bundle.max_target_len, vocab)
    else:
        steps = ConcatSteps(enc, dec, bundle.n_layers, vocab)
    invariance = batch_invariance(steps, corpus["source_ids"], pad_id=cfg["pad_id"])
    decision = int8_decision(bundle.meta["task"], dev["fp32"], dev["int8"], speed, invariance)
    decision["threads"] = engines["fp32"].threads
    log(f"[export] int8 gate: {decision}")
    return {
        "fp32_dev": dev["fp32"],
        "int8_dev": dev["int8"],
        "speed": speed,
        "decision": decision,
        "int8_is_cpu_default": decision["accurate_enough"] and decision["faster"] and decision["batch_invariant"],
    }


def int8_decision(
    task: str, fp32_dev: dict, int8_dev: dict, speed: dict[str, dict[str, float]], invariance: dict | None = None
) -> dict:
    """The gate itself: int8 may lose at most INT8_MAX_WER_LOSS points of the task's metric (WER for
    G2P, exact match otherwise), must be INT8_MIN_SPEEDUP times faster at EVERY measured batch size,
    and its rows must differ alone and batched by at most INT8_MAX_INVARIANCE_DIFF (`invariance`:
    export/invariance.py's figures; without them int8 is not invariant)."""
    metric, higher_better = ("wer", False) if task == "g2p" else ("exact_match", True)
    loss = (fp32_dev[metric] - int8_dev[metric]) if higher_better else (int8_dev[metric] - fp32_dev[metric])
    speedups = {b: speed["int8"][b] / speed["fp32"][b] for b in speed["fp32"]}
    return {
        "metric": metric,
        "loss_points": round(loss, 3),
        "max_loss_points": INT8_MAX_WER_LOSS,
        "speedup_vs_fp32": {k: round(v, 3) for k, v in speedups.items()},
        "min_speedup": INT8_MIN_SPEEDUP,
        "accurate_enough": loss <= INT8_MAX_WER_LOSS,
        "faster": all(x >= INT8_MIN_SPEEDUP for x in speedups.values()),
        "batch_invariant": invariance is not None and invariance["max_abs_diff"] <= INT8_MAX_INVARIANCE_DIFF,
        "invariance": invariance,
        "max_invariance_diff": INT8_MAX_INVARIANCE_DIFF,
    }
