"""PyTorch batches and greedy decoding of source strings: the reference decode that the
training loop's dev evaluation and `attnserve-eval` on a run directory share."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from training.data import Example
from training.metrics import task_metrics
from training.model import Transformer, greedy_decode
from training.tokenize import BOS_ID, EOS_ID, PAD_ID, UNK_ID, decode, encode, tokens


def collate(pairs: list[tuple[list[int], list[int]]], device: torch.device) -> dict[str, torch.Tensor]:
    """Right-padded source, decoder input (bos + target) and labels (target + eos, -100 on padding)."""
    b = len(pairs)
    s = max(len(p[0]) for p in pairs)
    t = max(len(p[1]) for p in pairs) + 1
    src = torch.full((b, s), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((b, t), PAD_ID, dtype=torch.long)
    labels = torch.full((b, t), -100, dtype=torch.long)
    for i, (sid, tid) in enumerate(pairs):
        src[i, : len(sid)] = torch.tensor(sid)
        tgt_in[i, : len(tid) + 1] = torch.tensor([BOS_ID] + tid)
        labels[i, : len(tid) + 1] = torch.tensor(tid + [EOS_ID])
    return {
        "src": src.to(device),
        "src_mask": (src != PAD_ID).long().to(device),
        "tgt_in": tgt_in.to(device),
        "tgt_mask": (labels != -100).long().to(device),
        "labels": labels.to(device),
    }


def decode_examples(
    model: Transformer,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    sources: list[str],
    batch_size: int = 256,
    progress: bool = False,
) -> list[str]:
    """Greedy outputs for `sources` (sorted by length for tight batches, returned in order)."""
    device = next(model.parameters()).device
    cfg = model.cfg
    ids = [encode(src_tok, s)[: cfg.max_source_len] for s in sources]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(ids)
    for start in tqdm(range(0, len(order), batch_size), desc="decode", disable=not progress, leave=False):
        idx = order[start : start + batch_size]
        batch = collate([(ids[i] or [UNK_ID], []) for i in idx], device)
        hyps = greedy_decode(model, batch["src"], batch["src_mask"], cfg.max_target_len)
        for i, h in zip(idx, hyps):
            out[i] = decode(tgt_tok, h)
    return out


def evaluate_model(model, src_tok, tgt_tok, examples: list[Example], task: str, batch_size: int = 256) -> dict:
    """Task metrics (training/metrics.py) of the model's greedy outputs on `examples`; leaves its mode as it was."""
    was_training = model.training
    model.eval()
    sources = [e.source for e in examples]
    hyps = decode_examples(model, src_tok, tgt_tok, sources, batch_size)
    model.train(was_training)
    return task_metrics(task, sources, hyps, [e.targets for e in examples], lambda text: tokens(tgt_tok, text))
