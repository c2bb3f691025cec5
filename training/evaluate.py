"""Evaluation of a run directory (PyTorch) or a model bundle (ONNX Runtime)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from training.data import load_examples
from training.metrics import task_metrics


def evaluate_path(
    path: Path, split: str, limit: int | None = None, dataset: str | None = None, batch_size: int = 256
) -> dict:
    if (path / "bundle.json").is_file():
        return evaluate_bundle(path, split, limit, dataset, batch_size)
    if (path / "checkpoint.pt").is_file() or (path / "best.pt").is_file():
        return evaluate_run(path, split, limit, dataset, batch_size)
    raise FileNotFoundError(f"{path} is neither a run directory (checkpoint.pt) nor a bundle (bundle.json)")


def evaluate_run(run_dir: Path, split: str, limit: int | None, dataset: str | None, batch_size: int) -> dict:
    from training.train import decode_examples, load_model, load_run_tokenizers

    cfg = json.loads((run_dir / "config.json").read_text())
    examples = load_examples(dataset or cfg["dataset"], split, cfg.get("strip_stress", False), limit)
    model = load_model(run_dir)
    src_tok, tgt_tok = load_run_tokenizers(run_dir)
    sources = [e.source for e in examples]
    t0 = time.perf_counter()
    hyps = decode_examples(model, src_tok, tgt_tok, sources, batch_size, progress=True)
    elapsed = time.perf_counter() - t0
    report = task_metrics(cfg.get("task", "g2p"), sources, hyps, [e.targets for e in examples])
    return {"source": "pytorch", "path": run_dir.name, "split": split, "decode_seconds": elapsed, **report}


def evaluate_bundle(bundle_dir: Path, split: str, limit: int | None, dataset: str | None, batch_size: int) -> dict:
    """Greedy decoding through the service's ONNX engine: what users get."""
    raise NotImplementedError("bundle evaluation arrives with the export stage")
