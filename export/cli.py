"""`attnserve-export build RUN --out BUNDLE`, `attnserve-export verify BUNDLE [--run RUN]`,
`attnserve-export requantize BUNDLE`, `attnserve-export add-lexicon BUNDLE`,
`attnserve-export add-variant BUNDLE fp16`, `attnserve-export add-context BUNDLE RUN` and
`attnserve-export simplify-encoder BUNDLE` and `attnserve-export from-hf HF_DIR --out BUNDLE`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnserve.export.errors import BuildError
from attnserve.service.engine.bundle import BundleError


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (BuildError, BundleError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnserve-export", description="Export a trained run to a verified model bundle.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="run directory -> model bundle (graphs, variants, parity, dev eval, int8 gate)")
    b.add_argument("run", type=Path, help="run directory (best.pt or checkpoint.pt, tokenizers, config.json)")
    b.add_argument("--out", type=Path, required=True, help="bundle directory to write (replaced if it holds a bundle)")
    b.add_argument("--model-id", help="model_id recorded in bundle.json (default: the bundle directory's name)")
    b.add_argument("--eval-limit", type=int, default=2000, help="dev examples for the fp32/int8 evaluation (0 = all)")
    b.add_argument("--parity-limit", type=int, default=256, help="inputs in the parity corpus (at least 200)")
    b.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: the CPUs this process may use)")
    b.add_argument("--dataset", help="dataset for the parity corpus and dev evaluation (default: the run's)")
    b.add_argument("--no-fp16", action="store_true", help="leave the fp16 variant (a CUDA extra) out: a smaller bundle")
    b.add_argument("--keep-partial", action="store_true", help="keep a failed build's BUNDLE.partial directory for inspection")
    b.add_argument(
        "--lexicon", action="store_true", help="ship the training dictionary (every source, all its targets) as a lexicon"
    )
    b.add_argument(
        "--word-level-source",
        action=argparse.BooleanOptionalAction,
        help="declare in bundle.json that the model reads one word, so running text is split into words (default: G2P)",
    )
    a = sub.add_parser("add-lexicon", help="give an existing bundle its training dictionary as a lexicon (no re-export)")
    a.add_argument("bundle", type=Path)
    a.add_argument("--dataset", help="dictionary to ship (default: the dataset bundle.json records)")
    a.add_argument("--word-level-source", action=argparse.BooleanOptionalAction, help="default: true for a G2P bundle")
    c = sub.add_parser(
        "add-context", help="give an existing bundle a context component (heteronyms by sentence) from a run (no re-export)"
    )
    c.add_argument("bundle", type=Path)
    c.add_argument("run", type=Path, help="the run of `attnserve-train context` (its context.json.gz)")
    g = sub.add_parser(
        "add-confidence",
        help="choose the score below which a model answer is flagged `guessed` (on the dev split; graphs untouched)",
    )
    g.add_argument("bundle", type=Path)
    g.add_argument("--share", type=float, default=0.10, help="share of the dev split's model answers to flag (default 0.10)")
    g.add_argument("--limit", type=int, help="words of each split to score (default: all)")
    r = sub.add_parser(
        "requantize", help="rewrite a bundle's int8 graphs from its fp32 graphs and re-run the int8 gate (no run needed)"
    )
    r.add_argument("bundle", type=Path)
    r.add_argument("--eval-limit", type=int, help="dev examples for the gate (default: as many as the bundle recorded)")
    r.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: the CPUs this process may use)")
    r.add_argument("--dataset", help="dataset for the dev evaluation (default: the bundle's)")
    av = sub.add_parser(
        "add-variant", help="add the fp16 v2 variant (CUDA's) to a bundle from its own fp32 graphs (no run, no torch)"
    )
    av.add_argument("bundle", type=Path)
    av.add_argument("variant", choices=["fp16"])
    av.add_argument(
        "--provider",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: prove CUDA parity where a GPU is present; cpu: the CPU checks only; cuda: a GPU is required",
    )
    av.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads for the CPU checks")
    se = sub.add_parser(
        "simplify-encoder", help="rewrite a bundle's encoders without their shape plumbing, proven bitwise the same"
    )
    se.add_argument("bundle", type=Path)
    se.add_argument(
        "--fused-attention",
        action="store_true",
        help="then self-attention as MultiHeadAttention (not bitwise), kept only where its greedy/invariance gate passes; "
        "there, Q, K, V and attention as QAttention and per-token work on real tokens only (both proven bitwise)",
    )
    h = sub.add_parser(
        "from-hf", help="Hugging Face Marian/BART/mBART checkpoint folder -> bundle, proven equal to transformers' generate"
    )
    h.add_argument("hf_dir", type=Path, help="config.json, generation_config.json, weights and tokenizer files")
    h.add_argument("--out", type=Path, required=True, help="bundle directory to write (replaced if it holds a bundle)")
    h.add_argument("--model-id", help="model_id recorded in bundle.json (default: the bundle directory's name)")
    h.add_argument("--parity-sources", type=int, default=50, help="sources in the parity corpus (at least 8)")
    h.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads for the checks")
    h.add_argument("--keep-partial", action="store_true", help="keep a failed import's BUNDLE.partial directory")
    v = sub.add_parser("verify", help="run the parity suite on a bundle; exit 1 on any failure")
    v.add_argument("bundle", type=Path)
    v.add_argument("--run", type=Path, help="the run it came from: recompute the PyTorch reference and compare numerically")
    v.add_argument("--threads", type=int)
    return p


# One function per subcommand: each takes the parsed arguments and returns the exit status; a BuildError,
# BundleError, missing file or bad value it raises is main's one-line error (exit 2). Each imports its stage
# inside it: add-variant and verify without --run need no torch (a GPU host, the service's Docker image).


def _build(args) -> int:
    from attnserve.export.pipeline.build import build  # torch, loaded by build alone

    if args.parity_limit < 200:
        raise BuildError("--parity-limit must be at least 200 (the parity suite needs 200 inputs)")
    build(
        args.run,
        args.out,
        model_id=args.model_id,
        eval_limit=args.eval_limit or 0,
        parity_limit=args.parity_limit,
        threads=args.threads,
        log=_log,
        dataset=args.dataset,
        fp16=not args.no_fp16,
        lexicon=args.lexicon,
        word_level_source=args.word_level_source,
        keep_partial=args.keep_partial,
    )
    return 0


def _add_lexicon(args) -> int:
    from attnserve.export.pipeline.lexicon import add_lexicon  # light: no onnx, no torch

    add_lexicon(args.bundle, args.dataset, args.word_level_source, _log)
    return 0


def _add_variant(args) -> int:
    from attnserve.export.pipeline.add_variant import add_variant  # onnx and ONNX Runtime, no torch

    meta = add_variant(args.bundle, args.variant, args.provider, args.threads, _log)
    print(json.dumps({"default_variant": meta["default_variant"], "fp16": meta["variants"]["fp16"]}, indent=2))
    return 0


def _add_context(args) -> int:
    from attnserve.export.pipeline.context import add_context  # light: no onnx, no torch

    add_context(args.bundle, args.run, _log)
    return 0


def _add_confidence(args) -> int:
    from attnserve.export.pipeline.confidence import add_confidence  # ONNX Runtime and the dictionary, no torch

    add_confidence(args.bundle, args.share, args.limit, _log)
    return 0


def _requantize(args) -> int:
    from attnserve.export.pipeline.requantize import requantize  # onnx and ONNX Runtime, loaded by requantize alone

    meta = requantize(args.bundle, args.eval_limit, args.threads, _log, args.dataset)
    print(json.dumps(meta["int8_gate"], indent=2))  # whether int8 is now the CPU default, and why
    return 0


def _simplify_encoder(args) -> int:
    from attnserve.export.pipeline.simplify_encoder import simplify_bundle_encoders

    record = simplify_bundle_encoders(args.bundle, _log, args.fused_attention)
    print(json.dumps({k: record[k] for k in ("files", "fused_attention") if k in record}, indent=2))
    return 0


def _from_hf(args) -> int:
    import importlib.util

    from attnserve.service.extras import EXTRAS, missing_line

    for module in EXTRAS["hf"]:
        if importlib.util.find_spec(module) is None:
            print(missing_line("attnserve-export from-hf", "hf", module), file=sys.stderr)
            return 2
    from attnserve.export.pipeline.from_hf import from_hf  # torch and transformers, loaded by from-hf alone

    if args.parity_sources < 8:
        raise BuildError("--parity-sources must be at least 8")
    meta = from_hf(
        args.hf_dir,
        args.out,
        model_id=args.model_id,
        parity_sources=args.parity_sources,
        threads=args.threads,
        keep_partial=args.keep_partial,
        log=_log,
    )
    print(json.dumps({"family": meta["family"], "default_variant": meta["default_variant"], "parity": meta["parity"]}, indent=2))
    return 0


def _verify(args) -> int:
    from attnserve.export.checks.parity import run_parity  # ONNX Runtime; torch only with --run

    model = None
    if args.run:
        from attnserve.training.run import load_model  # torch: only with --run

        model = load_model(args.run)
    report = run_parity(args.bundle, model=model, threads=args.threads, log=_log)
    print(json.dumps(report["figures"], indent=2))
    for failure in report["failures"]:
        print(f"FAIL: {failure}", file=sys.stderr)
    print("parity: " + ("FAILED" if report["failures"] else "passed"), file=sys.stderr)
    return 1 if report["failures"] else 0


COMMANDS = {
    "build": _build,
    "add-lexicon": _add_lexicon,
    "add-variant": _add_variant,
    "add-context": _add_context,
    "add-confidence": _add_confidence,
    "requantize": _requantize,
    "simplify-encoder": _simplify_encoder,
    "from-hf": _from_hf,
    "verify": _verify,
}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
