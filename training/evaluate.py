"""Evaluation of a run directory (PyTorch) or a model bundle (ONNX Runtime)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from attnserve.training.data import load_examples
from attnserve.training.metrics import task_metrics


def evaluate_path(
    path: Path,
    split: str,
    limit: int | None = None,
    dataset: str | None = None,
    batch_size: int = 256,
    num_beams: int = 1,
    variant: str = "auto",
) -> dict:
    if (path / "bundle.json").is_file():
        return evaluate_bundle(path, split, limit, dataset, batch_size, variant=variant, num_beams=num_beams)
    if num_beams > 1:
        raise ValueError("--num-beams scores a bundle (what the server runs): export the run first")
    if (path / "checkpoint.pt").is_file() or (path / "best.pt").is_file():
        return evaluate_run(path, split, limit, dataset, batch_size)
    raise FileNotFoundError(f"{path} is neither a run directory (checkpoint.pt) nor a bundle (bundle.json)")


def evaluate_run(run_dir: Path, split: str, limit: int | None, dataset: str | None, batch_size: int) -> dict:
    from attnserve.training.decode import decode_examples
    from attnserve.training.run import load_model, load_run_tokenizers
    from attnserve.training.tokenize import tokens

    if not (run_dir / "config.json").is_file():
        raise FileNotFoundError(f"{run_dir} has no config.json (is it a run directory?)")
    cfg = json.loads((run_dir / "config.json").read_text())
    examples = load_examples(dataset or cfg["dataset"], split, cfg.get("strip_stress", False), limit)
    model = load_model(run_dir)
    src_tok, tgt_tok = load_run_tokenizers(run_dir)
    sources = [e.source for e in examples]
    t0 = time.perf_counter()
    hyps = decode_examples(model, src_tok, tgt_tok, sources, batch_size, progress=True)
    elapsed = time.perf_counter() - t0
    refs = [e.targets for e in examples]
    report = task_metrics(cfg.get("task", "g2p"), sources, hyps, refs, lambda text: tokens(tgt_tok, text))
    return {"source": "pytorch", "path": run_dir.name, "split": split, "decode_seconds": elapsed, **report}


def evaluate_bundle(
    bundle_dir: Path,
    split: str,
    limit: int | None,
    dataset: str | None,
    batch_size: int,
    variant: str = "auto",
    threads: int | None = None,
    num_beams: int = 1,
) -> dict:
    """Greedy decoding (or beam search of width num_beams > 1, scoring its best hypothesis) through
    the service's ONNX engine: what users get. The model alone: no lexicon is consulted."""
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import Engine

    bundle = load_bundle(bundle_dir)
    engine = Engine(bundle, variant=variant, threads=threads)
    data = dataset or bundle.meta.get("dataset")
    if not data:
        raise FileNotFoundError(f"{bundle_dir}/bundle.json records no dataset: pass --dataset")
    t0 = time.perf_counter()
    report = evaluate_engine(
        engine,
        data,
        split,
        limit,
        bool(bundle.meta.get("strip_stress", False)),
        bundle.meta.get("task", "g2p"),
        batch_size,
        num_beams,
    )
    elapsed = time.perf_counter() - t0
    return {
        "source": "onnxruntime",
        "path": Path(bundle_dir).name,
        "variant": engine.variant,
        "provider": engine.provider,
        "threads": engine.threads,
        "split": split,
        "num_beams": num_beams,
        "decode_seconds": elapsed,
        **report,
    }


def evaluate_engine(
    engine, dataset: str, split: str, limit: int | None, strip_stress: bool, task: str, batch_size: int = 64, num_beams: int = 1
) -> dict:
    """Task metrics of greedy (num_beams 1) or beam-search outputs from an ONNX engine (continuous batching).

    A source longer than the model's max_source_len is not decoded: the server refuses it (422), so it counts as
    wrong here too, and `too_long` in the report says how many there were."""
    from attnserve.service.engine.engine import DecodingOptions

    examples = load_examples(dataset, split, strip_stress, limit)
    sources = [e.source for e in examples]
    ids = [engine.src_tokenizer.encode(s, add_special_tokens=False).ids or [engine.unk_id] for s in sources]
    fits = [i for i, x in enumerate(ids) if len(x) <= engine.max_source_len]
    options = DecodingOptions(max_new_tokens=engine.max_target_len, num_beams=num_beams if num_beams > 1 else None)
    results = engine.generate([ids[i] for i in fits], options, batch_size=max(batch_size, num_beams), refill=True)
    hyps = [""] * len(sources)
    for i, r in zip(fits, results):
        hyps[i] = r.text
    refs = [e.targets for e in examples]
    metrics = task_metrics(
        task, sources, hyps, refs, tokenize=lambda text: engine.tgt_tokenizer.encode(text, add_special_tokens=False).tokens
    )
    return {**metrics, "too_long": len(sources) - len(fits)}
