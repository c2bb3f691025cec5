"""`attnserve-export build`: run directory (Contract 1) -> model bundle (Contract 2).

Steps: export fp32 graphs, derive int8 and fp16 variants, copy the tokenizers,
record the parity corpus, write bundle.json with the sha256 of every file, rewrite the encoders without
their shape plumbing (int8's self-attention fused where its gate passes: export/pipeline/simplify_encoder.py),
run the parity suite (export/checks/parity.py) and the dev-split evaluation, apply the int8
gate, and write the figures into bundle.json. The bundle is built in
`BUNDLE.partial` and moved into place only when every check passed, so a
failed build never leaves a half-made bundle where the service looks; a failed build removes
`BUNDLE.partial` too (unless `keep_partial`) and raises one BuildError naming the step it failed in.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import time
from pathlib import Path

import onnx
import onnxruntime
import torch

from attnserve.export.checks.corpus import default_corpus, make_parity_corpus
from attnserve.export.checks.parity import run_parity
from attnserve.export.checks.variant_parity import fp16_check
from attnserve.export.errors import BuildError
from attnserve.export.graphs.format import OPSET, graph_io
from attnserve.export.graphs.v1 import export_decoder, export_encoder
from attnserve.export.graphs.variants import FP16_KEEP_FP32_OPS, FP32_BOUNDARY, INT8_QUANTIZATION, convert_fp16
from attnserve.export.pipeline.calibration import training_pairs, write_int8
from attnserve.export.pipeline.context import run_has_context, write_context
from attnserve.export.pipeline.explain import add_explain_sharing_weights
from attnserve.export.pipeline.int8_gate import int8_gate
from attnserve.export.pipeline.lexicon import with_fields_after, write_lexicon
from attnserve.export.pipeline.manifest import (
    BUNDLE_JSON,
    PARITY_CORPUS,
    TOKENIZERS,
    VARIANT_FILES,
    update_manifest,
    write_manifest,
)
from attnserve.export.pipeline.simplify_encoder import simplify_bundle_encoders
from attnserve.export.pipeline.v2 import add_v2_to_bundle
from attnserve.service.engine.bundle import FORMAT_VERSION, bounded_length, load_bundle
from attnserve.training.data import load_examples
from attnserve.training.run import load_model, load_run_tokenizers

LENGTH_MARGIN = 3  # tokens beyond the longest training target of the same source length


def learned_length_bound(train_cfg: dict, src_tok, tgt_tok, max_source_len: int, max_target_len: int) -> dict:
    """bundle.json's `length_bound`: per source length in tokens, the longest target (tokens, without
    the end token) among the training pairs of that source length (a length never seen takes the
    nearest shorter one's, or below every length seen, the nearest longer one's); the engine stops a request
    at that plus `margin`, so a model that loops stops near the longest real answer, not at max_target_len."""
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
    shortest_seen = next((x for x in longest if x), 0)
    longest = [x or shortest_seen for x in longest]  # and one shorter than any seen, the nearest longer one's
    return {"by_source_len": longest, "margin": LENGTH_MARGIN, "pairs": sum(len(t) for t in targets)}


def run_task(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def build(run_dir: Path, out_dir: Path, *args, keep_partial: bool = False, log=print, **kwargs) -> dict:
    """`build_steps` (its arguments and return value) with the failure handling of `partial_dir`: any error
    ends as one BuildError naming the step, and `BUNDLE.partial` is removed unless `keep_partial`."""
    steps: list[str] = []

    def tracked(msg: str) -> None:
        if "[export] " in msg:  # after build_steps' elapsed-time prefix
            steps.append(re.split(r" \(|; |: ", msg.partition("[export] ")[2])[0][:80])
        log(msg)

    out_dir = Path(out_dir)
    with partial_dir(out_dir.with_name(out_dir.name + ".partial"), keep_partial, steps):
        return build_steps(run_dir, out_dir, *args, log=tracked, **kwargs)


@contextlib.contextmanager
def partial_dir(work: Path, keep: bool, steps: list[str]):
    """Run the block; if it raises, `work` (the bundle being built) is removed unless `keep`, and the error
    becomes one BuildError line naming the last step logged (`steps`) and what was left behind. A BuildError
    raised before `work` exists (a bad argument) passes unchanged."""
    try:
        yield
    except BaseException as e:
        existed = work.exists()
        if existed and not keep:
            shutil.rmtree(work, ignore_errors=True)
        if not isinstance(e, Exception) or (isinstance(e, BuildError) and not existed):
            raise  # Ctrl-C and SystemExit as they were (cleaned up); a bad argument's own line
        step = steps[-1] if steps else "start"
        what = str(e) if isinstance(e, BuildError) else f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:400]}"
        left = f"{work} kept for inspection" if keep and existed else f"no {work.name} left; --keep-partial keeps it"
        raise BuildError(f"build failed at '{step}': {what} ({left})") from e


def build_steps(
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
    `lexicon=True` ships the training dictionary as the bundle's lexicon (export/pipeline/lexicon.py); a run directory
    holding a context component (`context.json.gz`, export/pipeline/context.py) gives the bundle it too.
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
    # The exporter writes every head split as Shape/Gather/Concat plumbing that ONNX Runtime cannot fold:
    # several hundred tiny nodes per encoder call, which weigh most on short sources. The parity suite
    # below then checks the rewritten encoders against PyTorch like every other graph.
    log("[export] encoders without their shape plumbing; int8's self-attention fused where its gate passes")
    simplify_bundle_encoders(work, log, fused_attention=True)
    meta = json.loads((work / BUNDLE_JSON).read_text())

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
    """PyTorch's outputs for the parity inputs, each stopped at the learned length bound: what the parity suite
    (export/checks/parity.py) compares to."""
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


def check_fp16(work: Path, meta: dict, threads: int | None, log) -> dict:
    """fp16 against fp32; a variant that fails is dropped from the bundle (and `meta`), not shipped."""
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
    """The parity suite (export/checks/parity.py),, its figures recorded in bundle.json; any failure stops the build."""
    log("[export] parity suite")
    report = run_parity(work, model=model, threads=threads, log=log)
    if not f16["ok"]:
        report["figures"]["fp16_dropped"] = f16
    update_manifest(work, parity=report["figures"])
    if report["failures"]:
        raise BuildError("parity failed: " + "; ".join(report["failures"]))
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
