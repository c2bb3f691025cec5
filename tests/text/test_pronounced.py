"""Words said otherwise than CMUdict or the model says them (service/text/pronounced.py, tables/pronounced.tsv): the
table served by the lexicon before CMUdict, accented and cased spellings matched as written, mixed-case words and
dotted names of code read in parts, and the operator's lexicon and a request's pronunciations still winning. The
default bundle through the in-process Generator (the request layer every front end shares)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from service_harness import serving
from tokenizers import Tokenizer

from attnserve.service.client import Generator
from attnserve.service.text import rules
from attnserve.service.text.lexicon import read_lexicon_file
from attnserve.service.text.pronounced import SERVED, TABLE_FILE, WRITTEN, fold, served_first
from attnserve.training.data import split_of

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"
TRAINING_PAIRS = Path(__file__).resolve().parents[2] / "training" / "pronounced_pairs.tsv"


def said(gen: Generator, text: str, **params) -> list[tuple[str, str]]:
    """(answer, source) of each word of `text`, as the server answers it."""
    (r,) = gen.generate_text_many([text], **params)
    return [(a[0].text, a[0].source) for a in r.answers]


@pytest.mark.parametrize("word", ["Kubernetes", "nginx", "SQLite", "Saoirse", "vsprintf", "kubectl", "PostgreSQL"])
def test_the_issues_words_are_read_from_the_table_before_the_model(gen, word):
    assert said(gen, word) == [(SERVED[word.lower()][0], "lexicon")]
    assert said(gen, word, lexicon=False)[0][1] == "model"  # the model's own answer is still there to ask for


def test_espeak_answers_say_the_table_readings_as_piper_voices_read_them(gen):
    (r,) = gen.generate_text_many(["Kubernetes and nginx"], alphabet="espeak")
    assert r.text == "kˌuːbɚnˈɛɾiz ænd ˈɛndʒənˌɛks"  # koo-ber-NET-eez, "engine x"
    (r,) = gen.generate_text_many(["crème brûlée, déjà vu"], alphabet="espeak")
    assert r.text == "kɹˈɛm bɹuːlˈeɪ, dˈeɪʒɑː vˈuː"


def test_an_accented_spelling_is_read_as_its_table_says_and_the_folded_one_as_cmudict_does(gen):
    assert said(gen, "crème brûlée") == [("K R EH1 M", "lexicon"), ("B R UW0 L EY1", "lexicon")]
    assert said(gen, "Crème")[0][0] == "K R EH1 M"
    assert said(gen, "creme")[0][0] == gen.requests.lexicon.lookup("creme")[0].text == "K R IY1 M"  # CMUdict's
    assert said(gen, "jalapeño") == said(gen, "jalapeno") == [(SERVED["jalapeno"][0], "lexicon")]
    # accents that fold into CMUdict's own spelling, already read right, need no entry
    for accented, plain in [("naïve", "naive"), ("façade", "facade"), ("Zürich", "zurich")]:
        assert fold(accented) not in SERVED
        assert said(gen, accented)[0][0] == gen.requests.lexicon.lookup(plain)[0].text


def test_a_word_written_in_capitals_is_read_as_written_only(gen):
    assert said(gen, "GNU") == [("G N UW1", "lexicon")] and said(gen, "a gnu")[1] == ("N UW1", "lexicon")  # the animal
    assert said(gen, "LaTeX, latex")[0][0] == "L EY1 T EH2 K" and said(gen, "latex")[0][0].endswith("K S")


def test_the_table_says_which_cmudict_reading_of_a_name_comes_first(gen):
    lexicon = gen.requests.lexicon
    for name, cmudict_first in [("Siobhan", "SH AW1 B AA2 N"), ("Niamh", "N AY1 AH0 M")]:
        readings = [a.text for a in lexicon.lookup(name)]
        assert readings[0] == SERVED[name.lower()][0] and cmudict_first in readings[1:]  # CMUdict's other still there
        (r,) = gen.generate_text_many([name], best_of=2)
        assert [a.text for a in r.answers[0]] == readings[:2]
    assert said(gen, "Goethe") == [("G ER1 T AH0", "lexicon")]  # CMUdict has only G OW1 TH


def test_an_operators_lexicon_and_a_requests_pronunciations_win_over_the_table(gen, tmp_path):
    assert said(gen, "Kubernetes", pronunciations={"kubernetes": "K UW1 B"}) == [("K UW1 B", "lexicon")]
    assert said(gen, "crème", pronunciations={"crème": "K R IY1 M"}) == [("K R IY1 M", "lexicon")]
    mine = tmp_path / "mine.tsv"
    mine.write_text("kubernetes\tK UW1 B ER0 N EY2 T S\ncreme\tK R EY1 M\ngnu\tG AH0 N UW1\nwebgpu\tW EH1 B\n")
    with Generator(DEFAULT_BUNDLE, lexicon_file=mine) as own:
        assert said(own, "Kubernetes") == [("K UW1 B ER0 N EY2 T S", "lexicon")]
        assert said(own, "crème") == [("K R EY1 M", "lexicon")]  # the table's accented reading gives way too
        assert said(own, "GNU") == [("G AH0 N UW1", "lexicon")]
        assert said(own, "WebGPU") == [("W EH1 B", "lexicon")]
        assert said(own, "nginx") == [(SERVED["nginx"][0], "lexicon")]  # what the file does not name is the table's


def test_a_table_words_possessive_is_the_word_and_the_ending_its_last_sound_takes(gen):
    assert "nginx's" not in gen.requests.lexicon
    assert said(gen, "nginx's config")[0] == (SERVED["nginx"][0] + " IH0 Z", "lexicon")  # after K S
    assert said(gen, "Goethe's") == [(SERVED["goethe"][0] + " Z", "lexicon")]  # after a vowel
    assert said(gen, "Siobhan's") == [("SH AH0 V AO1 N Z", "lexicon")]


@pytest.mark.parametrize(
    "word, reading",
    [
        ("WebGPU", "W EH1 B JH IY2 P IY2 Y UW2"),  # web G P U: the capitals spelt, the later parts' stress secondary
        ("SwiftUI", "S W IH1 F T Y UW2 AY2"),  # swift U I
        ("OpenGL", "OW1 P AH0 N JH IY2 EH2 L"),
        ("DirectX", "D ER0 EH1 K T EH2 K S"),  # a last capital alone after a word is its letter
        ("parseHTML", "P AA1 R S EY2 CH T IY2 EH2 M EH2 L"),
        ("toJSON", "T UW1 JH EY2 S AH0 N"),  # JSON as acronyms.tsv says it
    ],
)
def test_a_mixed_case_word_with_capitals_inside_is_read_from_its_parts(gen, word, reading):
    assert word.lower() not in gen.requests.lexicon
    assert said(gen, f"use {word} here")[1] == (reading, "lexicon")


def test_mixed_case_words_the_parts_rule_leaves_alone(gen):
    assert said(gen, "isNaN")[0][1] == "model"  # "Na" and a lone "N" are not an acronym and a word
    assert said(gen, "two GPUs")[1][0] == "JH IY1 P IY1 Y UW1 Z"  # an acronym's plural, as the acronym rules read it
    assert said(gen, "TensorFlow") == [("T EH1 N S ER0 F L OW2", "parts")]  # no capitals inside: compounds.py's


def test_a_dotted_name_of_code_reads_its_dots_and_spells_a_part_with_no_vowel(gen):
    words = [w for w, _ in said(gen, "import os.path and np.array")]
    dot = gen.requests.lexicon.lookup("dot")[0].text
    assert words[1:4] == ["AA1 S", dot, "P AE1 TH"] and words[5:8] == ["EH1 N P IY1", dot, "ER0 EY1"]
    (r,) = gen.generate_text_many(["os.path.join"], punctuation=True)
    assert [a[0].source for a in r.answers] == ["lexicon"] * 5  # no pause mark among them
    (r,) = gen.generate_text_many(["the end.It was"], punctuation=True)
    assert [a[0].source for a in r.answers][2] == "punctuation"  # a capital after the stop: two sentences


def test_every_reading_is_arpabet_the_model_writes_and_every_word_one_it_reads():
    tgt = Tokenizer.from_file(str(DEFAULT_BUNDLE / "tgt_tokenizer.json"))
    src = Tokenizer.from_file(str(DEFAULT_BUNDLE / "src_tokenizer.json"))
    for reading in [*(r for rs in SERVED.values() for r in rs), *WRITTEN.values()]:
        ids = tgt.encode(reading, add_special_tokens=False).ids
        assert tgt.token_to_id("<unk>") not in ids and len(ids) == len(reading.split()), reading
    for word in SERVED:
        assert src.token_to_id("<unk>") not in src.encode(word, add_special_tokens=False).ids, word
    assert len(SERVED) + len(WRITTEN) >= 150


def test_every_group_of_the_table_says_where_its_readings_come_from():
    block_has_comment = False
    for line in (rules.TABLES / TABLE_FILE).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            block_has_comment = False
        elif line.startswith("#"):
            block_has_comment = True
        else:
            assert block_has_comment, f"{line!r} has no source comment above it"


def test_a_bundle_that_cannot_write_the_tables_phones_gets_none_of_them():
    entries = {"hello": ["HH AH0 L OW1"], "siobhan": ["SH AW1 B AA2 N", "SH AH0 V AO1 N"]}
    assert served_first(entries, lambda reading: False) == entries
    served = served_first(entries, lambda reading: True)
    assert served["siobhan"] == ["SH AH0 V AO1 N", "SH AW1 B AA2 N"] and served["hello"] == entries["hello"]
    assert served["kubernetes"] == list(SERVED["kubernetes"])


def test_the_training_pairs_are_the_tables_words_and_none_of_cmudicts_held_out_ones():
    """training/pronounced_pairs.tsv: pairs for a later retrain (load_pairs_file's TSV), the table's words in their
    folded spelling with its readings; a CMUdict word of the dev or test split is left out, so scoring the model on
    those splits never sees a word it trained on. The `written` words are not there: their folded spelling is another
    word."""
    cmudict = {source for _, source, _ in read_lexicon_file(DEFAULT_BUNDLE / "lexicon.tsv.gz")}
    expected = [(w, r) for w, readings in SERVED.items() if w not in cmudict or split_of(w) == "train" for r in readings]
    pairs = [tuple(line.split("\t")) for line in TRAINING_PAIRS.read_text(encoding="utf-8").splitlines()]
    assert pairs == expected and len(pairs) >= 150
    assert not any(w in cmudict and split_of(w) == "test" for w, _ in pairs)
    assert {fold(w) for w in WRITTEN}.isdisjoint(w for w, _ in pairs)


def test_a_server_answers_the_table_in_details_words_and_its_lexicon_setting_wins(tmp_path):
    """The HTTP path (the server's own Lexicon.load, from ATTNSERVE_LEXICON's setting) on loopback."""
    mine = tmp_path / "mine.tsv"
    mine.write_text("nginx\tEH1 N JH IH0 N EH2 K S\n")
    text = "Kubernetes runs nginx and crème"
    with serving(DEFAULT_BUNDLE, lexicon=mine) as s, httpx.Client(timeout=60) as c:
        body = c.post(s.url + "/generate", json={"inputs": text, "parameters": {"details": "words"}}).json()
        espeak = c.post(s.url + "/generate", json={"inputs": "Kubernetes", "parameters": {"alphabet": "espeak"}}).json()
    words = body["details"]["words"]
    assert [(w["word"], w["text"], w["source"]) for w in words if w["word"] not in ("runs", "and")] == [
        ("kubernetes", SERVED["kubernetes"][0], "lexicon"),
        ("nginx", "EH1 N JH IH0 N EH2 K S", "lexicon"),  # the operator's file, over the table
        ("creme", "K R EH1 M", "lexicon"),
    ]
    assert text[words[-1]["start"] : words[-1]["end"]] == "crème"
    assert espeak["generated_text"] == "kˌuːbɚnˈɛɾiz"
