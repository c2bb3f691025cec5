"""The parity corpus (bundle.json `parity_corpus`) and its PyTorch reference: which inputs every parity check
runs, the decoding options it runs them with, and what PyTorch answers (greedy, seeded sampling, beam search, and
the teacher-forced logits over fixed tokens). torch is imported only where the reference is computed, so the
checks that read a recorded corpus run without it."""

from __future__ import annotations

import numpy as np

from attnserve.service.engine.engine import DecodingOptions
from attnserve.training.data import DataError, load_examples

MIN_CORPUS = 200
TF_STEPS = 8  # teacher-forced positions per parity input (at most the model's max_target_len)
TF_BATCH = 32
TF_FILLER_SEED = 7  # the tokens fed after the reference answer: the same for every input and every build
SAMPLING_CASES = [
    {"do_sample": True},
    {"temperature": 0.7, "top_k": 5},
    {"temperature": 1.2, "top_p": 0.9},
    {"do_sample": True, "repetition_penalty": 1.3},
    {"repetition_penalty": 1.5},  # greedy with a penalty
]
N_SAMPLING = 50
BEAM_WIDTH = 4  # beam parity: the n-best of beam search, width 4


def default_corpus(train_cfg: dict, limit: int) -> list[str]:
    """Dev-split sources of the run's dataset (then test, then train if dev is small)."""
    out: list[str] = []
    for split in ("dev", "test", "train"):
        try:
            out += [e.source for e in load_examples(train_cfg.get("dataset", "cmudict"), split, limit=limit)]
        except DataError:
            continue
        if len(out) >= limit:
            break
    return list(dict.fromkeys(out))[:limit]


def sampling_options(i: int, max_new_tokens: int) -> DecodingOptions:
    return DecodingOptions(max_new_tokens=max_new_tokens, seed=1000 + i, **SAMPLING_CASES[i % len(SAMPLING_CASES)])


def source_ids(src_tok, text: str, max_source_len: int, unk_id: int) -> list[int]:
    """As training evaluates: truncate to the model's limit; an unreadable input becomes unk."""
    ids = src_tok.encode(text, add_special_tokens=False).ids[:max_source_len]
    return ids or [unk_id]


def beam_options(max_new_tokens: int) -> DecodingOptions:
    return DecodingOptions(max_new_tokens=max_new_tokens, best_of=BEAM_WIDTH)


def reference_outputs(model, ids: list[list[int]], length_bound=None) -> dict:
    """PyTorch greedy ids for every input, sampled ids for the first N_SAMPLING (one input at a
    time), and beam search (width BEAM_WIDTH, all inputs in one batch): its hypotheses and scores.
    `length_bound`: source length -> the bundle's bound, applied as the engine applies it."""
    # torch only where the reference is computed: checks that read a recorded corpus run without it
    import torch

    from attnserve.training.decode import generate, generate_ids

    n_max = model.cfg.max_target_len
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny per-step work: one thread is faster than two fighting
    try:
        kw = {"length_bound": length_bound}
        greedy = [generate_ids(model, [x], DecodingOptions(max_new_tokens=n_max), **kw)[0] for x in ids]
        sampled = [generate_ids(model, [x], sampling_options(i, n_max), **kw)[0] for i, x in enumerate(ids[:N_SAMPLING])]
        beams = generate(model, ids, beam_options(n_max), **kw)
    finally:
        torch.set_num_threads(threads)
    return {
        "greedy": greedy,
        "sampled": sampled,
        "beam": {
            "width": BEAM_WIDTH,
            "hypotheses": [[h.token_ids for h in g.hypotheses] for g in beams],
            "scores": [[h.score for h in g.hypotheses] for g in beams],
        },
    }


def make_parity_corpus(model, src_tok, sources: list[str], length_bound=None) -> dict:
    cfg = model.cfg
    ids = [source_ids(src_tok, s, cfg.max_source_len, cfg.unk_id) for s in sources]
    corpus = {"sources": sources, "source_ids": ids, **reference_outputs(model, ids, length_bound)}
    tokens = forced_tokens(corpus["greedy"], cfg.bos_id, cfg.tgt_vocab_size, cfg.max_target_len)
    logits = teacher_forced_torch(model, ids, tokens)  # [N, T, V]
    top2 = np.sort(logits, axis=-1)[..., -2:]
    corpus["teacher_forced"] = {
        "tokens": tokens,
        "argmax": logits.argmax(-1).tolist(),
        "top_logit": top2[..., 1].tolist(),
        "margin": (top2[..., 1] - top2[..., 0]).tolist(),
        "source_spread": source_spread(logits),
    }
    return corpus


def forced_tokens(greedy: list[list[int]], bos_id: int, vocab: int, max_target_len: int) -> list[list[int]]:
    """The tokens fed at each teacher-forced step, per input: bos, the reference greedy answer, then filler
    tokens (seeded, one sequence for all inputs), cut to min(TF_STEPS, max_target_len)."""
    steps = min(TF_STEPS, max_target_len)
    filler = np.random.default_rng(TF_FILLER_SEED).integers(4, max(5, vocab), steps).tolist()
    return [([bos_id, *answer] + filler)[:steps] for answer in greedy]


def teacher_forced_torch(model, source: list[list[int]], tokens: list[list[int]]) -> np.ndarray:
    """PyTorch's full teacher-forced forward: logits [N, T, V] at every fed token (batches of TF_BATCH)."""
    import torch  # only with the model: checks that read a recorded corpus run without torch

    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for i in range(0, len(source), TF_BATCH):
                src, mask = padded(source[i : i + TF_BATCH], model.cfg.pad_id)
                tgt = torch.tensor(tokens[i : i + TF_BATCH])
                src_t, mask_t = torch.from_numpy(src), torch.from_numpy(mask)
                out.append(model(src_t, mask_t, tgt, torch.ones_like(tgt)).float().numpy())
    finally:
        torch.set_num_threads(threads)
    return np.concatenate(out)


def padded(rows: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [B, S] and their mask (1 real, 0 padding)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
        mask[r, : len(row)] = 1
    return ids, mask


def source_spread(logits: np.ndarray) -> float:
    """How far the input moves the first step's logits: the largest, over tokens, of (max - min across
    inputs). Near 0, the model answers alike whatever it reads, and no comparison of its outputs could
    tell a graph that mixed up its inputs from a right one."""
    first = logits[:, 0, :]
    return float((first.max(axis=0) - first.min(axis=0)).max())
