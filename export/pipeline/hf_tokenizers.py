"""A Hugging Face checkpoint's tokenizers as `tokenizers` JSON, the only tokenizer format the service reads.

- Marian: `source.spm` and `target.spm` (SentencePiece unigram models) with the joint `vocab.json`. Each side is a
  `tokenizers` Unigram over the joint vocabulary in its id order, scored by its own SentencePiece model, with that
  model's normaliser, whitespace handling and decoder (transformers' own SentencePiece conversion builds those), so
  a piece gets the id Marian's tokenizer gives it. A piece of the joint vocabulary that the side's model lacks (the
  other language's) is one Marian's SentencePiece never emits, but for one case: characters the model does not know
  come out as one unknown piece, which Marian looks up in the joint vocabulary by its text ("ß" of a German target
  in an English source). So such a piece is matched only when all its characters are unknown to the side's model;
  any other is held under a name no text normalises to (UNSEEN_MARK in front), which the decoder removes, so its id
  still decodes as transformers decodes it. (A run of unknown characters that the vocabulary spells only in parts,
  "ßß" where it holds "ß", is one `<unk>` to Marian and two pieces here.) Language codes (`>>fr<<`) are whole
  tokens, as Marian splits them off.
- T5 (`spiece.model` or `tokenizer.json`), BART (`tokenizer.json`, or `vocab.json` + `merges.txt`): the fast
  tokenizer transformers loads, saved as it is.

Every id of the tokenizer's special set (pad, eos, unk, bos, T5's sentinels) is a special token of both files, so
`decode(..., skip_special_tokens=True)` drops what transformers' decode drops and the service marks them special.
The ids the checkpoint's tokenizer adds around a source (Marian's and T5's `</s>`, BART's `<s>` ... `</s>`) are
returned as the bundle's `source_template`: the service tokenizes without special tokens and adds them itself.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer
from tokenizers.models import Unigram

from attnserve.export.errors import BuildError

MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
UNSEEN_MARK = "\ue000"  # a private-use character in front of a piece the side's model lacks: no text matches it
UNSEEN_PIECE_SCORE = -1e4  # below any SentencePiece piece's log-probability


def _spm_side(spm_file: Path, vocab: dict[str, int], special: list[str]) -> Tokenizer:
    """One side of a Marian tokenizer: the joint vocabulary scored and normalised by `spm_file`'s model."""
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString(spm_file.read_bytes())
    scores = {p.piece: p.score for p in proto.pieces if p.type == 1}  # normal pieces
    ordered = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in ordered] != list(range(len(ordered))):
        raise BuildError(f"{spm_file.parent / 'vocab.json'}: ids must run 0..{len(ordered) - 1} without gaps")
    codes = {p for p in vocab if p.startswith(">>") and p.endswith("<<")}  # matched whole, under their own names

    known = {c for p in scores for c in p}  # the characters the side's model can spell

    def piece(p: str) -> tuple[str, float]:
        if p in special:
            return p, 0.0
        if p in scores or p in codes or known.isdisjoint(p):  # the last: a text Marian's unknown piece may have
            return p, scores.get(p, UNSEEN_PIECE_SCORE)
        return UNSEEN_MARK + p, UNSEEN_PIECE_SCORE

    pieces = [piece(p) for p, _ in ordered]
    shell = SpmConverter.build_tokenizer_from_spm_proto(proto, pieces)  # the normaliser, pre-tokenizer, decoder
    tok = Tokenizer(Unigram(pieces, unk_id=vocab["<unk>"], byte_fallback=False))
    tok.normalizer = shell.normalizer
    tok.pre_tokenizer = shell.pre_tokenizer
    tok.decoder = _strip_both(shell.decoder)
    if codes:
        tok.add_tokens([AddedToken(c, normalized=False) for c in codes])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    return tok


def _strip_both(decoder):
    """Marian's decode strips the text at both ends; SentencePiece's decoder strips only the dummy prefix. The other
    side's pieces lose their UNSEEN_MARK first. The trailing space goes by a Replace anchored at the end, not a
    Strip decoder: `tokenizers` panics on a Strip after the Fuse when no token is left to decode (an answer of its
    end token alone, skip_special_tokens), and the panic would end the engine's thread."""
    from tokenizers import Regex, decoders

    return decoders.Sequence([decoders.Replace(UNSEEN_MARK, ""), decoder, decoders.Replace(Regex(" $"), "")])


def marian_tokenizers(hf_dir: Path, hf_tok) -> tuple[Tokenizer, Tokenizer]:
    import json

    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    if getattr(hf_tok, "separate_vocabs", False):
        raise BuildError(f"{hf_dir}: Marian with separate source and target vocabularies is not supported")
    special = [s for s in (hf_tok.eos_token, hf_tok.unk_token, hf_tok.pad_token) if s]
    missing = [s for s in special if s not in vocab]
    if missing:
        raise BuildError(f"{hf_dir / 'vocab.json'}: special token(s) {', '.join(missing)} missing")
    return _spm_side(hf_dir / "source.spm", vocab, special), _spm_side(hf_dir / "target.spm", vocab, special)


def fast_tokenizers(hf_tok) -> tuple[Tokenizer, Tokenizer]:
    """A fast tokenizer's backend, with every special id marked special, for both sides (one vocabulary)."""
    backend = getattr(hf_tok, "backend_tokenizer", None)
    if backend is None:
        raise BuildError(f"{type(hf_tok).__name__} has no `tokenizers` backend to convert")
    tok = Tokenizer.from_str(backend.to_str())
    tok.post_processor = None  # the service adds the source template itself (module docstring)
    specials = [t for t in hf_tok.all_special_tokens if t]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok, Tokenizer.from_str(tok.to_str())


def source_template(hf_tok, src_tok: Tokenizer) -> dict[str, list[int]]:
    """The ids transformers' tokenizer puts before and after a source's own ids: {"prefix": [...], "suffix": [...]}."""
    probe = "a b"
    with_special = list(hf_tok(probe).input_ids)
    plain = src_tok.encode(probe, add_special_tokens=False).ids
    for start in range(len(with_special) - len(plain) + 1):
        if with_special[start : start + len(plain)] == plain:
            return {"prefix": with_special[:start], "suffix": with_special[start + len(plain) :]}
    raise BuildError(f"the converted source tokenizer splits {probe!r} as {plain}, transformers' as {with_special}")


def special_ids(hf_tok) -> list[int]:
    """Every id of the tokenizer's special set, sorted."""
    return sorted({int(i) for i in hf_tok.all_special_ids if i is not None})
