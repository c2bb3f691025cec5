"""Tiny Hugging Face checkpoints built on the spot: seeded random weights and tokenizer files trained here, so no
test downloads anything. Each builder writes a folder as the Hub ships one (config.json, generation_config.json,
model.safetensors and the family's tokenizer files) and returns its path."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "the a one two three four five six seven eight nine ten cat dog house tree river stone light dark green red "
    "blue small large old new quick slow happy sad morning evening water fire city road market friend letter "
    "book window door garden summer winter bread milk coffee music song story paper pencil table chair"
).split()


def sentences(n: int, seed: int) -> list[str]:
    """n short sentences of WORDS, seeded: the tokenizers' training text and the tests' sources."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(2, 9))
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ""]))
    return out


def _train_spm(text_file: Path, prefix: Path, vocab_size: int) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(text_file),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=1,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
        num_threads=1,
    )


def joint_vocab(out: Path, extra: tuple[str, ...] = ()) -> dict[str, int]:
    """Marian's vocab.json for out/source.spm and out/target.spm: </s> and <unk> first, both models' pieces, `extra`
    pieces neither model has, <pad> last."""
    import sentencepiece as spm

    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source.spm", "target.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(out / name))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    for piece in extra:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def build_marian(out: Path, seed: int = 0, d_model: int = 32, layers: int = 2, spm_vocab: int = 120) -> Path:
    """A Marian (opus-mt's layout: two SentencePiece models, a joint vocab.json, pad as the decoder start,
    bad_words_ids [[pad]], forced eos at max_length) with random weights."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    text = out / "train.txt"
    text.write_text("\n".join(sentences(400, seed)) + "\n")
    _train_spm(text, out / "source", spm_vocab)
    _train_spm(text, out / "target", spm_vocab - 10)
    (out / "source.model").rename(out / "source.spm")
    (out / "target.model").rename(out / "target.spm")
    for f in ("source.vocab", "target.vocab", "train.txt"):
        (out / f).unlink()
    vocab = joint_vocab(out)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer", "model_max_length": 64}))
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=64,
        activation_function="swish",
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    with torch.no_grad():  # random weights large enough that outputs differ by source (not one repeated token)
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.25)
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(out)
    GenerationConfig(
        bad_words_ids=[[pad]],
        bos_token_id=0,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_length=24,
        num_beams=4,
        pad_token_id=pad,
    ).save_pretrained(out)
    return out


def _byte_level_bpe(out: Path, seed: int, vocab_size: int) -> Path:
    """A byte-level BPE tokenizer.json as BART's (specials <s> <pad> </s> <unk> first, <mask> last), trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences(400, seed), trainer)
    tok.add_special_tokens(["<mask>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    path = out / "tokenizer.json"
    tok.save(str(path))
    return path


def build_bart(out: Path, seed: int = 0, d_model: int = 32, layers: int = 2, mbart: bool = False) -> Path:
    """A BART (learned positions at offset 2, post-LN, layernorm_embedding, byte-level BPE in tokenizer.json alone)
    with random weights and bart-large-cnn's kind of generation rules: decoder start </s>, forced <s> first,
    no-repeat trigrams, length penalty 2, early stopping, a minimum length. `mbart`: mBART's layers instead (pre-LN,
    a final LayerNorm per stack, the embeddings scaled), with the same tokenizer file."""
    import torch
    from tokenizers import Tokenizer
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        GenerationConfig,
        MBartConfig,
        MBartForConditionalGeneration,
    )

    out.mkdir(parents=True, exist_ok=True)
    vocab = Tokenizer.from_file(str(_byte_level_bpe(out, seed, 400))).get_vocab_size()
    (out / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BartTokenizer", "model_max_length": 64, "add_prefix_space": False})
    )
    config = (MBartConfig if mbart else BartConfig)(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_bos_token_id=0,
        forced_eos_token_id=2,
        scale_embedding=mbart,
    )
    torch.manual_seed(seed)
    model = (MBartForConditionalGeneration if mbart else BartForConditionalGeneration)(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.25)
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(out)
    GenerationConfig(
        bos_token_id=0,
        decoder_start_token_id=2,
        eos_token_id=2,
        forced_bos_token_id=0,
        forced_eos_token_id=2,
        pad_token_id=1,
        no_repeat_ngram_size=3,
        length_penalty=2.0,
        early_stopping=True,
        num_beams=4,
        min_length=4,
        max_length=20,
    ).save_pretrained(out)
    return out


def build_t5(out: Path, seed: int = 0, d_model: int = 32, layers: int = 2, v1_1: bool = True) -> Path:
    """A T5 (relative position buckets, RMSNorm, no biases; v1.1/Flan: gated GELU and an untied head; v1.0: ReLU and
    a tied head rescaled by d_model ** -0.5) with random weights and a SentencePiece spiece.model trained here (pad 0,
    eos 1, unk 2, 100 sentinels added by T5's tokenizer)."""
    import sentencepiece as spm
    import torch
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    text = out / "train.txt"
    text.write_text("\n".join(sentences(400, seed)) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(out / "spiece"),
        vocab_size=120,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
        num_threads=1,
    )
    for f in ("spiece.vocab", "train.txt"):
        (out / f).unlink()
    (out / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "T5Tokenizer", "model_max_length": 64, "extra_ids": 100})
    )
    config = T5Config(
        vocab_size=220,
        d_model=d_model,
        d_kv=d_model // 4,
        d_ff=2 * d_model,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu" if v1_1 else "relu",
        tie_word_embeddings=not v1_1,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.5)
    model.save_pretrained(out)
    GenerationConfig(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, max_length=20).save_pretrained(out)
    return out
