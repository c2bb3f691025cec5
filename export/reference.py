"""The PyTorch reference decoders that the ONNX engine is compared with.

- `reference_generate`: the model's own encode/cross_kv/decode with the KV
  cache, token choice through the shared sampler (service/sampling.py) on the
  logits converted to numpy float64, so greedy and seeded sampling pick ids by
  the very same rule as the engine. Rows of a batch start together.
- `use_cache=False` recomputes the whole prefix every step (what a decoder
  without a cache costs; attnserve-bench measures it).
"""

from __future__ import annotations

import secrets

import numpy as np
import torch

from service.engine import DecodingOptions, suppress
from service.sampling import greedy_token, sample_token
from training.model import Transformer, decoder_self_bias


@torch.no_grad()
def reference_generate(
    model: Transformer,
    sources: list[list[int]],
    options: DecodingOptions | list[DecodingOptions] | None = None,
    use_cache: bool = True,
) -> list[list[int]]:
    """Generated ids (no bos/eos) for each source, all rows decoded together in one padded batch."""
    cfg = model.cfg
    b = len(sources)
    options = DecodingOptions() if options is None else options
    opts = [options] * b if isinstance(options, DecodingOptions) else list(options)
    s = max(len(x) for x in sources)
    src = torch.full((b, s), cfg.pad_id, dtype=torch.long)
    src_mask = torch.zeros(b, s, dtype=torch.long)
    for i, ids in enumerate(sources):
        src[i, : len(ids)] = torch.tensor(ids)
        src_mask[i, : len(ids)] = 1
    memory, cross_bias = model.encode(src, src_mask)
    cross = model.cross_kv(memory)
    rngs = [np.random.default_rng(o.seed if o.seed is not None else secrets.randbits(63)) if o.sampling else None for o in opts]
    params = [o.sampling_params() if o.sampling else None for o in opts]
    out: list[list[int]] = [[] for _ in range(b)]
    done = [False] * b
    fed = torch.full((b, 1), cfg.bos_id, dtype=torch.long)  # every token fed so far, bos first
    past = None
    steps = max(o.max_new_tokens for o in opts)
    for step in range(steps):
        if use_cache:
            ids = fed[:, -1:]
            positions = torch.full((b, 1), step, dtype=torch.long)
            mask = torch.ones(b, step + 1, dtype=torch.long)
            logits, past, _ = model.decode(ids, positions, decoder_self_bias(mask, 1), cross, cross_bias, past)
        else:
            t = fed.shape[1]
            positions = torch.arange(t)[None, :].expand(b, t)
            mask = torch.ones(b, t, dtype=torch.long)
            logits, _, _ = model.decode(fed, positions, decoder_self_bias(mask, t), cross, cross_bias)
        last = logits[:, -1].double().numpy()  # [B, V]
        next_ids = np.zeros(b, dtype=np.int64)
        for i in range(b):
            if done[i]:
                continue
            o = opts[i]
            row = suppress(last[i], cfg.eos_id) if len(out[i]) < o.min_new_tokens else last[i]
            if params[i] is not None:
                tok = sample_token(row, rngs[i], params[i], out[i])
            else:
                tok = greedy_token(row, out[i], o.repetition_penalty)
            next_ids[i] = tok
            if tok == cfg.eos_id:
                done[i] = True
            else:
                out[i].append(tok)
                done[i] = len(out[i]) >= o.max_new_tokens
        if all(done):
            break
        fed = torch.cat([fed, torch.from_numpy(next_ids)[:, None]], dim=1)
    return out
