"""The proof that an imported bundle answers as transformers does: the same checkpoint's `generate` against the
service's own engine (service/engine/engine.py) on the bundle's graphs, over a corpus of sources.

Greedy and beam search (the checkpoint's width, or 4) are compared by their token ids, the end token included:
transformers' sequence after its decoder start, cut at its first end token, against the engine's ids and
whether it ended with the end token. Each source runs alone through transformers (no padding), in batches through
the engine. Tokenization is part of the proof: the converted source tokenizer must give each source the ids
transformers' tokenizer gives it.
"""

from __future__ import annotations

import random
import time

import torch

from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import Engine
from attnserve.service.engine.options import DecodingOptions


def synthetic_sources(src_tok, special: set[int], n: int, seed: int = 0) -> list[str]:
    """n texts of 3-12 random pieces of the source vocabulary, decoded: a corpus any checkpoint can read."""
    rng = random.Random(seed)
    vocab = src_tok.get_vocab()
    pieces = sorted(i for t, i in vocab.items() if i not in special and not (t.startswith(">>") and t.endswith("<<")))
    texts: list[str] = []
    while len(texts) < n:
        text = src_tok.decode([rng.choice(pieces) for _ in range(rng.randint(3, 12))], skip_special_tokens=True).strip()
        if text and text not in texts:
            texts.append(text)
    return texts


def transformers_answer(sequence: list[int], eos_ids: set[int]) -> tuple[tuple[int, ...], bool]:
    """(ids after the decoder start up to the first end token, whether one ended it)."""
    ids = sequence[1:]
    for i, t in enumerate(ids):
        if t in eos_ids:
            return tuple(ids[:i]), True
    return tuple(ids), False


def transformers_answers(model, hf_tok, sources: list[str], max_new_tokens: int, num_beams: int) -> list[tuple]:
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    out = []
    with torch.no_grad():
        for text in sources:
            enc = hf_tok(text, return_tensors="pt")
            # max_length, not max_new_tokens (the same limit: the decoder start counts), so no warning per call
            seq = model.generate(**enc, num_beams=num_beams, do_sample=False, max_length=max_new_tokens + 1)
            out.append(transformers_answer(seq[0].tolist(), eos_ids))
    return out


def engine_answers(engine: Engine, sources: list[str], options: DecodingOptions) -> list[tuple]:
    results = engine.generate(sources, options, batch_size=32)
    return [(tuple(r.token_ids), r.finish_reason == "eos_token") for r in results]


def tokenizer_parity(engine: Engine, hf_tok, sources: list[str]) -> list[str]:
    """The sources whose converted ids differ from transformers' tokenizer's."""
    return [s for s in sources if engine.tokenize_text(s) != list(hf_tok(s).input_ids)]


def hf_parity(
    bundle_dir, model, hf_tok, sources: list[str], max_new_tokens: int, num_beams: int, variant="fp32", threads=None, log=print
) -> dict:
    """Figures for bundle.json `parity`: tokenizer, greedy and beam agreement of `variant` with transformers."""
    engine = Engine(load_bundle(bundle_dir), variant=variant, provider="cpu", threads=threads)
    figures: dict = {"reference": f"transformers generate on the same checkpoint, {len(sources)} sources alone"}
    differ = tokenizer_parity(engine, hf_tok, sources)
    figures["tokenizer_equal"] = f"{len(sources) - len(differ)}/{len(sources)}"
    figures["max_new_tokens"] = max_new_tokens
    for name, beams, options in (
        ("greedy", 1, DecodingOptions(max_new_tokens=max_new_tokens)),
        (f"beam{num_beams}", num_beams, DecodingOptions(max_new_tokens=max_new_tokens, num_beams=num_beams)),
    ):
        t0 = time.perf_counter()
        ref = transformers_answers(model, hf_tok, sources, max_new_tokens, beams)
        t1 = time.perf_counter()
        ours = engine_answers(engine, sources, options)
        t2 = time.perf_counter()
        equal = sum(a == b for a, b in zip(ref, ours))
        figures[name] = {
            "equal": equal,
            "of": len(sources),
            "transformers_s": round(t1 - t0, 2),
            "engine_s": round(t2 - t1, 2),
            "ended_with_eos": sum(e for _, e in ref),
        }
        log(f"[from-hf] {variant} {name}: {equal}/{len(sources)} equal to transformers")
    return figures


def variant_agreement(bundle_dir, variant: str, sources: list[str], max_new_tokens: int, threads=None) -> float:
    """Share of sources whose greedy ids under `variant` equal fp32's (the int8 gate's accuracy figure)."""
    bundle = load_bundle(bundle_dir)
    options = DecodingOptions(max_new_tokens=max_new_tokens)
    ref = engine_answers(Engine(bundle, variant="fp32", provider="cpu", threads=threads), sources, options)
    got = engine_answers(Engine(bundle, variant=variant, provider="cpu", threads=threads), sources, options)
    return sum(a == b for a, b in zip(ref, got)) / len(sources)
