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


AUTO = "auto"
AUTO_MIN_TOKENS = 4.0  # bpe_vocab_size=auto: the mean training text stays at least this many tokens long
AUTO_MAX_VOCAB = 8000
AUTO_DISTINCT_SHARE = 4  # ... and the vocabulary at most a quarter of the distinct texts
AUTO_SAMPLE = 20_000  # distinct texts the search measures on (the final tokenizer learns from all)


def build_tokenizer(texts: Iterable[str], kind: str, lowercase: bool = False, vocab_size: int | str = 8000) -> Tokenizer:
    """Train a tokenizer of `kind` on `texts`; `lowercase` makes "Hello" and "hello" one input.
    `vocab_size` (bpe only): a number, or "auto" (`auto_bpe_vocab_size`)."""
    if kind not in KINDS:
        raise ValueError(f"tokenizer kind must be one of {KINDS}, not {kind!r}")
    if kind == "bpe" and vocab_size == AUTO:
        texts = list(texts)
        vocab_size = auto_bpe_vocab_size(texts, lowercase)
    return _train_tokenizer(texts, kind, lowercase, int(vocab_size) if kind == "bpe" else 0)


def auto_bpe_vocab_size(texts: list[str], lowercase: bool = False) -> int:
    """The vocabulary `bpe_vocab_size=auto` chooses: the largest size, at most AUTO_MAX_VOCAB and at most a
    quarter of the distinct texts, at which the mean text is still AUTO_MIN_TOKENS tokens or more; never
    below the characters themselves. Short answers (digits, labels, codes) thus stay a few pieces each, which
    the model can recombine, instead of one token per answer, which it can only memorise; long texts get the
    full AUTO_MAX_VOCAB. Searched by bisection on up to AUTO_SAMPLE distinct texts (fewer tokens per text as
    the vocabulary grows)."""
    distinct = list(dict.fromkeys(texts))
    sample = distinct[:: max(1, len(distinct) // AUTO_SAMPLE)][:AUTO_SAMPLE]

    def mean_tokens(size: int) -> float:
        tok = _train_tokenizer(sample, "bpe", lowercase, size)
        return sum(len(tok.encode(t, add_special_tokens=False).ids) for t in sample) / max(1, len(sample))

    lo = _train_tokenizer(sample, "bpe", lowercase, len(SPECIAL_TOKENS) + 1).get_vocab_size()  # the alphabet alone
    hi = max(lo, min(AUTO_MAX_VOCAB, len(distinct) // AUTO_DISTINCT_SHARE))
    if mean_tokens(hi) >= AUTO_MIN_TOKENS:
        return hi
    while hi - lo > 1:  # mean_tokens(lo) >= AUTO_MIN_TOKENS or lo is the alphabet; mean_tokens(hi) below it
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if mean_tokens(mid) >= AUTO_MIN_TOKENS else (lo, mid)
    return lo


def _train_tokenizer(texts: Iterable[str], kind: str, lowercase: bool, vocab_size: int) -> Tokenizer:
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


BPE_DISTINCT_WARN_SHARE = 0.5  # a bpe target vocabulary larger than this share of the distinct targets: warn


def bpe_target_warning(vocab: int, distinct_targets: int, setting: int | str) -> str | None:
    """The warning train() prints when a bpe target vocabulary (`vocab` tokens, from bpe_vocab_size=`setting`)
    is more than BPE_DISTINCT_WARN_SHARE of the `distinct_targets` of the training data; None below that."""
    if not distinct_targets or vocab <= BPE_DISTINCT_WARN_SHARE * distinct_targets:
        return None
    return (
        f"WARNING: the bpe target vocabulary has {vocab} tokens for {distinct_targets} distinct training targets "
        f"(bpe_vocab_size={setting}), so many targets are a single token that the model can only memorise, never "
        "compose, and dev exact match may stay at 0: use --set bpe_vocab_size=auto (sized from the data), a smaller "
        "number, or --set tgt_tokenizer=char. A closed set of labels, every one seen in training, may ignore this."
    )
