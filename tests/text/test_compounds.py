"""A word the lexicon lacks whose case or the parts table names its dictionary parts is read from them
(service/text/compounds.py): one word of the answer, source `parts`, the later parts' primary stress made secondary;
greedy requests only, as lexicon answers. The default bundle through the in-process Generator (the request layer every
front end shares)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from service_harness import read_one as one
from service_harness import serving

from attnserve.service.client import Generator
from attnserve.service.text.compounds import case_parts, compound_parts, compound_reading
from attnserve.service.text.lexicon import Lexicon, read_lexicon_file
from attnserve.training.data import split_of, strip_stress

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


def test_a_word_splits_where_its_case_changes():
    assert case_parts("TensorFlow") == ["tensor", "flow"]
    assert case_parts("HTTPServer") == ["http", "server"]
    assert case_parts("OpenStreetMap") == ["open", "street", "map"]
    assert case_parts("Smartwatch") is None and case_parts("smartwatch") is None and case_parts("NASA") is None


def test_only_words_whose_every_part_is_known_are_split_and_never_a_lower_case_word():
    known = {"tensor", "flow", "smart", "watch", "allister", "the", "rapist", "torch", "pie"}
    assert compound_parts("TensorFlow", "tensorflow", known) == ("tensor", "flow")
    assert compound_parts("PyTorch", "pytorch", known) == ("pie", "torch")  # the parts table: "py" is said "pie"
    assert compound_parts("XyzFlow", "xyzflow", known) is None  # a part the dictionary lacks: the model reads it
    assert compound_parts("McAllister", "mcallister", known) is None  # a name's prefix
    assert compound_parts("smartwatch", "smartwatch", known) is None  # no split marked: the model reads it
    assert compound_parts("therapist", "therapist", known) is None


def test_later_parts_primary_stress_becomes_secondary():
    readings = {"tensor": "T EH1 N S ER0", "flow": "F L OW1", "open": "OW1 P AH0 N", "map": "M AE1 P"}
    assert compound_reading(["tensor", "flow"], readings.get) == "T EH1 N S ER0 F L OW2"
    assert compound_reading(["open", "flow", "map"], readings.get) == "OW1 P AH0 N F L OW2 M AE2 P"
    assert compound_reading(["tensor", "xyz"], readings.get) is None


@pytest.mark.parametrize(
    "word, reading",
    [("PyTorch", "P AY1 T AO2 R CH"), ("TensorFlow", "T EH1 N S ER0 F L OW2"), ("NumPy", "N AH1 M P AY2")],
)
def test_camel_case_words_are_one_word_read_from_their_parts(gen, word, reading):
    assert word.lower() not in gen.requests.lexicon
    r = one(gen, f"I use {word} daily.")
    assert r.text.split(" | ")[2] == reading and len(r.answers) == 4
    assert r.answers[2][0].source == "parts" and r.answers[2][0].score is None
    (w,) = [w for w in r.word_details() if w["source"] == "parts"]
    assert (w["start"], w["end"]) == (6, 6 + len(word))


def test_sampling_and_lexicon_false_keep_the_models_own_answer(gen):
    assert one(gen, "PyTorch", lexicon=False).answers[0][0].source == "model"
    assert one(gen, "PyTorch", do_sample=True, seed=3).answers[0][0].source == "model"
    r = one(gen, "TensorFlow", best_of=2)  # the parts' reading first, the model's beam after it
    assert [a.source for a in r.answers[0]] == ["parts", "model"]


def test_closed_compounds_and_known_words_are_not_split(gen):
    for word in ("smartwatch", "livestream", "therapist", "McDonald", "YouTube"):
        r = one(gen, word)
        assert all(a[0].source != "parts" for a in r.answers), (word, r.text)
    assert one(gen, "therapist").answers[0][0].source == "lexicon"


# ---- measured on CMUdict's test split -----------------------------------------------------------------------------
def closed_splits(known: set[str], words: list[str], min_part: int = 4) -> dict[str, tuple[str, str]]:
    """The words that split into two `known` words of at least `min_part` letters each in exactly one way."""
    out = {}
    for w in words:
        found = [(w[:k], w[k:]) for k in range(min_part, len(w) - min_part + 1) if w[:k] in known and w[k:] in known]
        if len(found) == 1:
            out[w] = found[0]
    return out


def test_test_split_words_that_split_into_two_dictionary_words_are_read_as_well_as_the_model_reads_them():
    """Every test-split word taken out of the lexicon; those that split into two dictionary words (the measure of
    service/text/compounds.py's docstring) are read by the service at least as well as from their parts alone, none
    of them is answered from its two parts (a lower-case word names no split), and at least 75% are right (stress ignored)."""
    entries: dict[str, list[str]] = {}
    for _, source, target in read_lexicon_file(DEFAULT_BUNDLE / "lexicon.tsv.gz"):
        entries.setdefault(source, []).append(target)
    test = [w for w in entries if split_of(w) == "test" and w.isascii() and w.isalpha()]
    kept = {w: t for w, t in entries.items() if split_of(w) != "test"}
    splits = closed_splits(set(kept), test)
    assert len(splits) >= 500
    with Generator(DEFAULT_BUNDLE) as g:
        g.requests.lexicon = Lexicon(kept, g.engine.src_tokenizer, g.engine.tgt_tokenizer, one_word=True)
        words = sorted(splits)
        results = list(g.generate_text_many(words))

    def right(w: str, reading: str) -> bool:
        return strip_stress(reading) in {strip_stress(t) for t in entries[w]}

    # a long word whose model reading ended early is read again in parts, and says so (service/requests/parts.py)
    assert all(r.answers[0][0].source == "model" or r.warnings for r in results)
    served = sum(right(w, r.text) for w, r in zip(words, results)) / len(words)
    from_parts = sum(right(w, compound_reading(splits[w], lambda p: kept[p][0])) for w in words) / len(words)
    assert served >= max(0.75, from_parts), (served, from_parts)


def test_over_http_a_camel_case_word_is_one_word_of_the_answer_and_of_the_stream():
    text = "PyTorch beats TensorFlow"
    with serving(DEFAULT_BUNDLE) as s, httpx.Client(timeout=60) as c:
        body = c.post(s.url + "/generate", json={"inputs": text, "parameters": {"details": True}}).json()
        with c.stream("POST", s.url + "/generate_stream", json={"inputs": text}) as r:
            events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
        alone = c.post(s.url + "/generate", json={"inputs": "PyTorch", "parameters": {"details": True}}).json()
    assert body["generated_text"] == "P AY1 T AO2 R CH | B IY1 T S | T EH1 N S ER0 F L OW2"
    words = body["details"]["words"]
    assert [(w["start"], w["end"], w["source"]) for w in words] == [(0, 7, "parts"), (8, 13, "lexicon"), (14, 24, "parts")]
    assert events[-1]["generated_text"] == body["generated_text"]
    assert alone["details"]["source"] == "parts" and alone["details"]["score"] is None
