"""Marian's converted tokenizers against transformers' MarianTokenizer on the same files, where the joint vocabulary
holds pieces one side's SentencePiece model lacks (the other language's, as every opus-mt pair has): a character
only such pieces hold reads as `<unk>` there, and their ids decode as transformers decodes them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

sys.path.insert(0, str(Path(__file__).parent))
from checkpoints import _train_spm, joint_vocab, sentences  # noqa: E402

from attnserve.export.pipeline.hf_tokenizers import marian_tokenizers  # noqa: E402

OTHER_SIDE = ("\u2581stra\u00dfe", "\u00df", "\u2581x9", "9", "\u2581caf\u00e9")  # letters and digits neither model saw


@pytest.fixture(scope="module")
def marian_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("marian-tok")
    text = out / "train.txt"
    text.write_text("\n".join(sentences(300, 3)) + "\n")
    for side in ("source", "target"):
        _train_spm(text, out / side, 90)
        (out / f"{side}.model").rename(out / f"{side}.spm")
    vocab = joint_vocab(out, OTHER_SIDE)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return out


def test_characters_only_the_other_sides_pieces_hold_read_as_unk_as_in_transformers(marian_files):
    from transformers import MarianTokenizer

    hf = MarianTokenizer(str(marian_files / "source.spm"), str(marian_files / "target.spm"), str(marian_files / "vocab.json"))
    src, _ = marian_tokenizers(marian_files, hf)
    texts = ["the cat and the dog", "Straße 9 is a road", "x9 café", "the straße", "9 ß 9", "filler151"]
    for text in texts:
        ours = src.encode(text, add_special_tokens=False).ids
        theirs = hf(text, add_special_tokens=False).input_ids
        assert ours == theirs, text
    # the cases this test is for: an unknown character the joint vocabulary holds, and a run of them it does not
    vocab = json.loads((marian_files / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["\u00df"] in hf(texts[1], add_special_tokens=False).input_ids
    assert hf.unk_token_id in hf(texts[5], add_special_tokens=False).input_ids


def test_the_other_sides_pieces_decode_as_transformers_decodes_them(marian_files):
    from transformers import MarianTokenizer

    hf = MarianTokenizer(str(marian_files / "source.spm"), str(marian_files / "target.spm"), str(marian_files / "vocab.json"))
    _, tgt = marian_tokenizers(marian_files, hf)
    vocab = json.loads((marian_files / "vocab.json").read_text(encoding="utf-8"))
    the = hf("the", text_target="the", add_special_tokens=False)["labels"]
    for piece in OTHER_SIDE:
        ids = [*the, vocab[piece], *the]
        assert tgt.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True), piece


def test_an_answer_of_special_tokens_alone_decodes_to_nothing_as_in_transformers(marian_files):
    from transformers import MarianTokenizer

    hf = MarianTokenizer(str(marian_files / "source.spm"), str(marian_files / "target.spm"), str(marian_files / "vocab.json"))
    _, tgt = marian_tokenizers(marian_files, hf)
    vocab = json.loads((marian_files / "vocab.json").read_text(encoding="utf-8"))
    for ids in ([], [vocab["</s>"]], [vocab["<pad>"], vocab["</s>"]], [vocab["\u2581the"]] if "\u2581the" in vocab else []):
        assert tgt.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True), ids
