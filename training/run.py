"""A run directory (Contract 1) as the stages after training read it: its tokenizers and its model.

Export, evaluation and the tests load runs through these; the training loop (train.py)
writes them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer

from attnserve.training.config import ModelConfig
from attnserve.training.model import Transformer


def load_run_tokenizers(run_dir: Path) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers of the run."""
    return (
        Tokenizer.from_file(str(run_dir / "src_tokenizer.json")),
        Tokenizer.from_file(str(run_dir / "tgt_tokenizer.json")),
    )


def load_model(run_dir: Path, which: str = "best", device: str | torch.device = "cpu") -> Transformer:
    """The model from `best.pt` (or `checkpoint.pt` when no best exists / which="last")."""
    path = run_dir / ("best.pt" if which == "best" else "checkpoint.pt")
    if not path.is_file():
        path = run_dir / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint in {run_dir} (expected best.pt or checkpoint.pt)")
    ckpt = torch.load(path, map_location=device, weights_only=False)
    model = Transformer(ModelConfig.from_dict(ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval()
