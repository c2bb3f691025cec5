"""An imported Marian of opus-mt's shape against CTranslate2 and transformers' `generate`, one thread each.

The checkpoint is built here (no download): opus-mt-en-de's dimensions (6+6 layers, d_model 512, 8 heads, d_ff
2048, swish, a 58,101-token joint vocabulary) with seeded random weights, SentencePiece models trained on a few
hundred generated sentences and the vocabulary filled to size. Then:
- `attnserve-export from-hf` imports it (its parity proof against transformers runs as always);
- `ct2-transformers-converter` converts the same folder to CTranslate2 int8;
- each engine decodes the same sources at batch 1 and 32, greedy and beam 4, every answer forced to `--tokens` tokens
  (min = max length), so each does the same work: tokens/s is generated tokens over wall time, the encoder included.
The imported bundle's int8 is measured when it passed its gate, or written beside it for the measurement only.

    python -m benchmarks.hf_marian_speed --work /tmp/opus-bench --tokens 32 --out benchmarks/results/hf_marian_speed.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

VOCAB = 58101
WORDS = "the a of to and in is it you that he was for on are with as his they be at one have this from".split()


def build_opus_shaped(out: Path, seed: int = 0) -> Path:
    import sentencepiece as spm
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    corpus = out / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(500)) + "\n")
    for side in ("source", "target"):
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(out / side),
            vocab_size=40,
            hard_vocab_limit=False,
            eos_id=1,
            unk_id=0,
            bos_id=-1,
            pad_id=-1,
            minloglevel=2,
        )
        (out / f"{side}.model").rename(out / f"{side}.spm")
        (out / f"{side}.vocab").unlink()
    corpus.unlink()
    vocab = {"</s>": 0, "<unk>": 1}
    for side in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(out / f"{side}.spm"))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    while len(vocab) < VOCAB - 1:  # opus-mt's vocabulary size: pieces no SentencePiece model emits
        vocab[f"\u2581filler{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = VOCAB - 1
    (out / "vocab.json").write_text(json.dumps(vocab))
    pad = VOCAB - 1
    config = MarianConfig(  # opus-mt-en-de's config.json; MarianConfig's own defaults are a larger model (1024, 12+12)
        vocab_size=VOCAB,
        decoder_vocab_size=VOCAB,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="swish",
        max_position_embeddings=512,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    with torch.no_grad():  # default init gives near-flat logits, whose argmax rounding decides: import refuses those
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.05)
    model.save_pretrained(out)
    GenerationConfig(
        bad_words_ids=[[pad]],
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_length=512,
        num_beams=4,
        pad_token_id=pad,
    ).save_pretrained(out)
    return out


def sources(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(6, 14))) for _ in range(n)]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(hf_dir: Path, bundle: Path, ct2_dir: Path, texts: list[str], tokens: int, batch: int, beams: int) -> dict:
    """Seconds and tokens/s of each engine on `texts` in batches of `batch`, `beams` 1 (greedy) or more."""
    import ctranslate2
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import Engine
    from attnserve.service.engine.options import DecodingOptions

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    out: dict = {}
    # every answer forced to `tokens` tokens: the last is the checkpoint's forced end token
    # greedy is num_beams None: num_beams=1 asks for a beam search of width 1 (service/engine/options.py)
    options = DecodingOptions(max_new_tokens=tokens, min_new_tokens=tokens - 1, num_beams=beams if beams > 1 else None)
    rows = batch * beams  # a beam request takes a row per beam: `batch` requests at once, as the others take them
    for variant in ("int8", "fp32"):
        engine = Engine(load_bundle(bundle, check_hashes=False), variant=variant, provider="cpu", threads=1)
        engine.generate(texts[:batch], options, batch_size=rows)  # warm
        out[f"attnserve_{variant}"] = timed(lambda e=engine: e.generate(texts, options, batch_size=rows, sort=False))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="int8", intra_threads=1)
    pieces = [tok.convert_ids_to_tokens(tok(t).input_ids) for t in texts]

    def ct2_run():
        for i in range(0, len(pieces), batch):
            translator.translate_batch(
                pieces[i : i + batch],
                beam_size=beams,
                max_decoding_length=tokens,
                min_decoding_length=tokens,
                max_batch_size=batch,
            )

    ct2_run()
    out["ctranslate2_int8"] = timed(ct2_run)

    def hf_run():
        with torch.no_grad():
            for i in range(0, len(texts), batch):
                enc = tok(texts[i : i + batch], return_tensors="pt", padding=True)
                model.generate(**enc, num_beams=beams, do_sample=False, max_new_tokens=tokens, min_new_tokens=tokens)

    out["transformers_fp32"] = timed(hf_run)
    return {name: {"seconds": round(s, 3), "tokens_per_s": round(len(texts) * tokens / s, 1)} for name, s in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="folder for the checkpoint, the bundle and the CTranslate2 model")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--sources", type=int, default=64)
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    hf_dir, bundle, ct2_dir = args.work / "hf", args.work / "bundle", args.work / "ct2-int8"
    if not (hf_dir / "config.json").is_file():
        build_opus_shaped(hf_dir)
    if not (bundle / "bundle.json").is_file():
        subprocess.run(
            [sys.executable, "-m", "attnserve.export", "from-hf", str(hf_dir), "--out", str(bundle), "--threads", "1"], check=True
        )
    meta = json.loads((bundle / "bundle.json").read_text())
    if "int8" not in meta["variants"]:  # left out by its accuracy gate (random weights): written for speed alone
        from tokenizers import Tokenizer

        from attnserve.export.pipeline.calibration import write_int8
        from attnserve.export.pipeline.manifest import VARIANT_FILES

        src = Tokenizer.from_file(str(bundle / "src_tokenizer.json"))
        tgt = Tokenizer.from_file(str(bundle / "tgt_tokenizer.json"))
        pairs = [(s, s) for s in sources(32, seed=9)]
        write_int8(bundle, VARIANT_FILES["fp32"], VARIANT_FILES["int8"], src, tgt, meta["config"], pairs, print)
        meta["variants"]["int8"] = {**VARIANT_FILES["int8"], "kv_cache": "concat"}
        for name in VARIANT_FILES["int8"].values():  # listed, as load_bundle requires of every referenced file
            meta["files"][name] = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
        (bundle / "bundle.json").write_text(json.dumps(meta))  # this copy is for measuring; its hashes go unchecked
    if not (ct2_dir / "model.bin").is_file():
        subprocess.run(
            ["ct2-transformers-converter", "--model", str(hf_dir), "--output_dir", str(ct2_dir), "--quantization", "int8"],
            check=True,
        )
    texts = sources(args.sources)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    results = {
        "cpu": cpu,
        "threads": 1,
        "tokens": args.tokens,
        "sources": args.sources,
        "cells": {},
        "date": time.strftime("%Y-%m-%d"),
        "command": "python -m benchmarks.hf_marian_speed " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    for beams in (1, 4):
        for b in (1, 32):
            cell = f"{'greedy' if beams == 1 else f'beam{beams}'}_batch{b}"
            results["cells"][cell] = measure(hf_dir, bundle, ct2_dir, texts, args.tokens, b, beams)
            print(cell, json.dumps(results["cells"][cell]), file=sys.stderr, flush=True)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
