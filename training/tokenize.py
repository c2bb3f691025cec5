"""Tokenizers through Hugging Face `tokenizers` (Contract 1: saved as JSON).

Special ids are fixed for every tokenizer the project builds, so the model
config and `bundle.json` can record them once:
    <pad>=0, <s>=1 (bos), </s>=2 (eos), <unk>=3.
Kinds:
- "char": one token per character (G2P source: letters).
- "whitespace": one token per whitespace-separated word (G2P target: phonemes).
- "bpe": byte-pair encoding over Metaspace pieces, for general text.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
KINDS = ("char", "whitespace", "bpe")


def build_tokenizer(texts: Iterable[str], kind: str, lowercase: bool = False, vocab_size: int = 8000) -> Tokenizer:
    """Train a tokenizer of `kind` on `texts`; `lowercase` makes "Hello" and "hello" one input."""
    if kind not in KINDS:
        raise ValueError(f"tokenizer kind must be one of {KINDS}, not {kind!r}")
    norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    else:
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        if kind == "char":
            tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
            tok.decoder = decoders.Fuse()  # characters join back without spaces
        else:
            tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        trainer = trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok.normalizer = normalizers.Sequence(norm)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, f"special token {name} must have id {i}"
    return tok


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    return tok.decode(list(ids), skip_special_tokens=True)


def tokens(tok: Tokenizer, text: str) -> list[str]:
    """The token strings of `text` (what token-level metrics compare)."""
    return tok.encode(text, add_special_tokens=False).tokens


UNKNOWN_WARN_FRACTION = 0.03  # more dev tokens than this unknown to a tokenizer: train() warns at start


def unknown_fraction(tok: Tokenizer, texts: Iterable[str]) -> tuple[int, int]:
    """(tokens of `texts` that `tok` maps to <unk>, all their tokens)."""
    unknown = total = 0
    for text in texts:
        ids = encode(tok, text)
        unknown += ids.count(UNK_ID)
        total += len(ids)
    return unknown, total


def unknown_tokens_warning(side: str, key: str, kind: str, unknown: int, total: int, from_bundle: bool) -> str | None:
    """The warning train() prints when more than UNKNOWN_WARN_FRACTION of the dev set's `side` tokens are unknown
    to its tokenizer (`key` = `kind`), naming the setting that likely fixes it; None below that."""
    if not total or unknown / total <= UNKNOWN_WARN_FRACTION:
        return None
    share = (
        f"{100 * unknown / total:.1f}% of the dev set's {side} tokens ({unknown} of {total}) are unknown to the {side} tokenizer"
    )
    if from_bundle:
        fix = (
            f"the bundle's {side} vocabulary (--init-from) lacks them and cannot grow: check that the data uses the "
            "bundle's symbols, or train from scratch without --init-from"
        )
    elif kind == "whitespace":
        fix = (
            f"{key}=whitespace knows only the whole words seen in training, so a word first seen in dev is <unk>: "
            f"for single words or open vocabularies use --set {key}=char (or --set {key}=bpe)"
        )
    elif kind == "bpe":
        fix = f"{key}=bpe has not seen these symbols in training: use --set {key}=char, or more training data"
    else:
        fix = f"{key}={kind} has not seen these characters in training: check the dev data, or add pairs that use them"
    return f"WARNING: {share}; the model cannot {'read' if side == 'source' else 'produce'} them. {fix}."
