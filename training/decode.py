"""The PyTorch decode loop: the reference the ONNX engine is compared with, and training's dev decoder.

The model's own encode/cross_kv/decode with the KV cache (or without it:
`use_cache=False` recomputes the whole prefix every step, what a decoder
without a cache costs; attnserve-bench measures it). Token choice, seeding,
stopping, beam search and n-best ranking are service/engine/'s decoding rooms
(step.py's `choose_tokens` and what it calls), the very code the engine calls, on the logits converted to numpy: so greedy, seeded
sampling and beam search pick ids by the same rules on both sides, and a
difference in ids is a difference in the graphs' numbers.

All requests' rows start together in one padded batch (a request owns one row,
or its beams / best_of samples); rows that finish keep stepping, unread, until
every row has. Beam rows follow their beams by gathering the cache by parent.

Also the training batches (`collate`) and the greedy decode of source strings that the
training loop's dev evaluation and `attnserve-eval` on a run directory share.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from attnserve.service.engine.options import DecodingOptions
from attnserve.service.engine.rows import Generation, RowState, new_generation
from attnserve.service.engine.step import choose_tokens
from attnserve.training.data import Example
from attnserve.training.metrics import task_metrics
from attnserve.training.model import Transformer, decoder_self_bias
from attnserve.training.tokenize import BOS_ID, EOS_ID, PAD_ID, UNK_ID, decode, encode, tokens


@torch.no_grad()
def generate(
    model: Transformer,
    sources: list[list[int]],
    options: DecodingOptions | list[DecodingOptions] | None = None,
    use_cache: bool = True,
    decode: Callable[[list[int]], str] | None = None,
    length_bound: Callable[[int], int | None] | None = None,
) -> list[Generation]:
    """Decode every source (lists of ids); the finished generations, in input order.

    `decode`: target ids -> text (the target tokenizer's), needed for stop sequences and texts.
    `length_bound`: source length -> the bundle's length bound (None: none), as the engine applies it.
    """
    cfg = model.cfg
    device = next(model.parameters()).device
    options = DecodingOptions() if options is None else options
    opts = [options] * len(sources) if isinstance(options, DecodingOptions) else list(options)
    if any(o.stop for o in opts) and decode is None:
        raise ValueError("stop sequences need `decode` (the target tokenizer's ids -> text)")
    text = decode or (lambda ids: "")
    gens = [
        new_generation(src, o, length_bound(len(src)) if length_bound else None, cfg.eos_id, text)
        for src, o in zip(sources, opts)
    ]
    rows = [row for g in gens for row in g.rows]
    owner = torch.tensor([i for i, g in enumerate(gens) for _ in g.rows], device=device)  # row -> its request
    state = RowState(cfg.tgt_vocab_size)
    state.take(np.zeros(0, dtype=np.int64), rows)

    s = max(len(x) for x in sources)
    src = torch.full((len(sources), s), cfg.pad_id, dtype=torch.long, device=device)
    src_mask = torch.zeros(len(sources), s, dtype=torch.long, device=device)
    for i, ids in enumerate(sources):
        src[i, : len(ids)] = torch.tensor(ids)
        src_mask[i, : len(ids)] = 1
    memory, cross_bias = model.encode(src, src_mask)  # once per request; its rows share it
    cross = [(k[owner], v[owner]) for k, v in model.cross_kv(memory)]
    cross_bias = cross_bias[owner]

    r = len(rows)
    fed = torch.full((r, 1), cfg.bos_id, dtype=torch.long, device=device)  # every token fed so far, bos first
    past = None
    for step in range(max(g.max_new_tokens for g in gens) + 1):
        if not state.active.any():
            break
        if use_cache:
            positions = torch.full((r, 1), step, dtype=torch.long, device=device)
            mask = torch.ones(r, step + 1, dtype=torch.long, device=device)
            logits, past, _ = model.decode(fed[:, -1:], positions, decoder_self_bias(mask, 1), cross, cross_bias, past)
        else:
            t = fed.shape[1]
            positions = torch.arange(t, device=device)[None, :].expand(r, t)
            mask = torch.ones(r, t, dtype=torch.long, device=device)
            logits, _, _ = model.decode(fed, positions, decoder_self_bias(mask, t), cross, cross_bias)
        choice = choose_tokens(state, logits[:, -1].double().cpu().numpy(), None, cfg.eos_id, text)
        if choice.reorder is not None:  # beams continue from their parents
            d, o = (torch.from_numpy(x).to(device) for x in choice.reorder)
            fed[d] = fed[o].clone()
            if past is not None:
                past = [(k.index_copy(0, d, k[o]), v.index_copy(0, d, v[o])) for k, v in past]
        for row in choice.leaving:
            state.free(row)
        fed = torch.cat([fed, torch.from_numpy(choice.tokens).to(device)[:, None]], dim=1)
    return gens


def generate_ids(model: Transformer, sources: list[list[int]], options=None, use_cache: bool = True, **kw) -> list[list[int]]:
    """The best hypothesis' ids (no bos/eos) per source."""
    return [g.token_ids for g in generate(model, sources, options, use_cache, **kw)]


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
    cfg = model.cfg
    ids = [encode(src_tok, s)[: cfg.max_source_len] for s in sources]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(ids)
    for start in tqdm(range(0, len(order), batch_size), desc="decode", disable=not progress, leave=False):
        idx = order[start : start + batch_size]
        hyps = generate_ids(model, [ids[i] or [UNK_ID] for i in idx], DecodingOptions(max_new_tokens=cfg.max_target_len))
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
