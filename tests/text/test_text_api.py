"""The lexicon and running text over HTTP: a real uvicorn server on 127.0.0.1 serving the default model.

The default model (models/g2p-en) carries all of CMUdict and reads one word at a time; it loads
in about a second, so one server serves the module and the tests that need other settings
(an operator's lexicon, a bundle without the word-level flag) start their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from service_harness import free_port, metric, scrape, serving, stream
from tokenizers import Tokenizer

from attnserve.service.engine.bundle import write_bundle_json
from attnserve.service.text.pronounced import SERVED
from attnserve.service.text.reader import WORD_SEPARATOR
from attnserve.training.data import cmudict_path, parse_cmudict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
SENTENCE = "Hello, world! I have 2 cats."
SENTENCE_WORDS = ["hello", "world", "i", "have", "two", "cats"]
OOV = "zyxoplat"  # in no dictionary: the model answers it


@pytest.fixture(scope="module")
def cmudict() -> dict[str, list[str]]:
    return parse_cmudict(cmudict_path())


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE) as s:
        yield s.url


def generate(url: str, inputs: str, **parameters) -> dict:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def concatenated(tokens: list[dict]) -> str:
    return "".join(t["text"] for t in tokens)


# ---- the lexicon ------------------------------------------------------------------------------
@pytest.mark.parametrize("word", ["python", "hello", "don't"])
def test_dictionary_words_answer_from_the_lexicon_and_say_so(url, cmudict, word):
    answer = generate(url, word)
    details = answer["details"]
    assert answer["generated_text"] == cmudict[word][0]  # CMUdict's first pronunciation
    assert details["source"] == "lexicon" and details["score"] is None
    assert details["finish_reason"] == "eos_token"
    tokens = details["tokens"]
    assert all(t["logprob"] is None for t in tokens)
    assert tokens[-1]["special"] and details["generated_tokens"] == len(tokens)
    tgt = Tokenizer.from_file(str(DEFAULT_BUNDLE / "tgt_tokenizer.json"))
    ids = [t["id"] for t in tokens if not t["special"]]  # real target ids
    assert tgt.decode(ids, skip_special_tokens=True) == answer["generated_text"] == concatenated(tokens)
    assert [(w["word"], w["text"], w["source"]) for w in details["words"]] == [(word, cmudict[word][0], "lexicon")]


def test_lexicon_false_gets_the_models_own_answer(url, cmudict):
    answer = generate(url, "hello", lexicon=False)
    details = answer["details"]
    assert details["source"] == "model" and isinstance(details["score"], float)
    assert all(isinstance(t["logprob"], float) for t in details["tokens"])
    assert answer["generated_text"] != cmudict["hello"][0]  # this model's own answer differs from the dictionary's


def test_a_stop_sequence_ends_a_lexicon_answer_as_it_would_the_models(url, cmudict):
    phonemes = cmudict["attention"][0].split()  # AH0 T EH1 N SH AH0 N
    stop = phonemes[2]
    for stream_it in (False, True):
        if stream_it:
            body = {"inputs": "attention", "parameters": {"stop": [stop], "details": True}}
            status, events = stream(url + "/generate_stream", body)
            assert status == 200, events
            text, reason = concatenated([e["token"] for e in events]), events[-1]["details"]["finish_reason"]
        else:
            details = generate(url, "attention", stop=[stop])["details"]
            text, reason = concatenated(details["tokens"]), details["finish_reason"]
            assert details["source"] == "lexicon" and details["tokens"][-1]["text"].strip() == stop
        assert text == " ".join(phonemes[:3]) and reason == "stop_sequence", (text, reason)


def test_sampling_top_n_tokens_and_decoder_input_details_ask_the_model(url):
    for parameters in ({"do_sample": True, "seed": 3}, {"top_n_tokens": 2}, {"decoder_input_details": True}):
        assert generate(url, "hello", **parameters)["details"]["source"] == "model", parameters


def test_best_of_gives_the_lexicon_variants_first_then_model_beams(url, cmudict):
    answer = generate(url, "hello", best_of=3)
    details = answer["details"]
    others = details["best_of_sequences"]
    assert [answer["generated_text"], others[0]["generated_text"]] == cmudict["hello"][:2]
    assert details["source"] == others[0]["source"] == "lexicon"
    assert details["score"] is None and others[0]["score"] is None
    # the model's beams fill the rest, in their own order, skipping a beam the lexicon already gave
    beams = generate(url, "hello", best_of=3, lexicon=False)
    model_texts = [beams["generated_text"], *(b["generated_text"] for b in beams["details"]["best_of_sequences"])]
    expected = [t for t in model_texts if t not in cmudict["hello"]][0]
    assert (others[1]["generated_text"], others[1]["source"]) == (expected, "model")
    assert isinstance(others[1]["score"], float)
    assert [w["text"] for w in details["words"][0]["alternatives"]] == [o["generated_text"] for o in others]


def test_operator_lexicon_overrides_the_bundles(tmp_path, cmudict):
    override = tmp_path / "mine.tsv"
    override.write_text("# house style\nhello\tHH EH0 L OW1\n\nzyxoplat\tZ IH1 K S OW0 P L AE2 T\n")
    with serving(DEFAULT_BUNDLE, lexicon=override) as s:
        assert generate(s.url, "hello")["generated_text"] == "HH EH0 L OW1"
        best = generate(s.url, "hello", best_of=2)["details"]
        assert best["best_of_sequences"][0]["source"] == "model"  # the file replaced both of CMUdict's entries
        text = generate(s.url, f"Hello {OOV}, python")
        assert text["generated_text"] == WORD_SEPARATOR.join(["HH EH0 L OW1", "Z IH1 K S OW0 P L AE2 T", cmudict["python"][0]])
        info = httpx.get(s.url + "/info", timeout=10).json()["lexicon"]
        assert info["override_file"] == "mine.tsv" and info["overridden_sources"] == 2


def test_bad_operator_lexicon_line_stops_start_up_naming_its_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("# comment\nhello\tHH EH0 L OW1\nworld\tW ER1 L D XX9\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "attnserve.service", str(DEFAULT_BUNDLE), "--lexicon", str(bad), "--port", str(free_port())]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"{bad}:3:" in lines[0] and "XX9" in lines[0]


# ---- running text -----------------------------------------------------------------------------
def test_a_sentence_gives_each_words_dictionary_pronunciation(url, cmudict):
    answer = generate(url, SENTENCE)
    details = answer["details"]
    words = details["words"]
    assert [w["word"] for w in words] == SENTENCE_WORDS
    assert [w["text"] for w in words] == [cmudict[w][0] for w in SENTENCE_WORDS]
    assert all(w["source"] == "lexicon" for w in words) and details["source"] == "lexicon"
    assert answer["generated_text"] == WORD_SEPARATOR.join(w["text"] for w in words)
    assert SENTENCE[words[4]["start"] : words[4]["end"]] == "2"
    tokens = details["tokens"]
    assert concatenated(tokens) == answer["generated_text"]
    assert details["generated_tokens"] == len(tokens) == sum(len(w["text"].split()) + 1 for w in words)
    assert details["finish_reason"] == "eos_token" and details["score"] is None


def test_an_unknown_word_in_running_text_goes_to_the_model(url):
    alone = generate(url, OOV)
    answer = generate(url, f"I like {OOV}.")
    words = answer["details"]["words"]
    assert [(w["word"], w["source"]) for w in words] == [("i", "lexicon"), ("like", "lexicon"), (OOV, "model")]
    assert words[2]["text"] == alone["generated_text"] and words[2]["score"] == pytest.approx(alone["details"]["score"])
    assert answer["details"]["source"] == "model"
    model_tokens = [t for t in answer["details"]["tokens"] if t["logprob"] is not None]
    assert [t["id"] for t in model_tokens] == [t["id"] for t in alone["details"]["tokens"]]
    assert concatenated(answer["details"]["tokens"]) == answer["generated_text"]


def test_stream_texts_concatenate_to_generated_text_with_lexicon_and_model_words(url):
    text = f"Hello, {OOV}! 2 cats."
    expected = generate(url, text)
    status, events = stream(url + "/generate_stream", {"inputs": text, "parameters": {"details": True}})
    assert status == 200
    assert "".join(e["token"]["text"] for e in events) == expected["generated_text"] == events[-1]["generated_text"]
    assert all(e["generated_text"] is None for e in events[:-1])
    assert [e["index"] for e in events] == list(range(1, len(events) + 1))
    assert [e["token"]["id"] for e in events] == [t["id"] for t in expected["details"]["tokens"]]
    assert [e["token"]["logprob"] is None for e in events] == [t["logprob"] is None for t in expected["details"]["tokens"]]
    assert events[-1]["details"]["generated_tokens"] == expected["details"]["generated_tokens"] == len(events)


def test_model_words_of_one_text_share_decoder_steps(url):
    before = scrape(url)
    answer = generate(url, "zyxoplat quarbly flimbertosh", lexicon=False)
    after = scrape(url)
    assert [w["source"] for w in answer["details"]["words"]] == ["model"] * 3
    steps = metric(after, "attnserve_batch_size_count") - metric(before, "attnserve_batch_size_count")
    rows = metric(after, "attnserve_batch_size_sum") - metric(before, "attnserve_batch_size_sum")
    assert rows > steps  # more than one row per step: the three words ran together


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ("\u2603 \U0001f600", "'\u2603'"),  # nothing readable: refused, naming what was skipped
        ("1234567 " * 1000, "at most 10000 are read per request (max_words)"),  # 11 words each
        ("a" * 20001, "at most 20000 are read per request (max_text_chars)"),
        ("9" * 700 + ".5", "too large"),  # a digit string over 15 digits is read digit by digit; a decimal is not
    ],
)
def test_unreadable_text_is_a_422_naming_the_problem(url, inputs, fragment):
    r = httpx.post(url + "/generate", json={"inputs": inputs}, timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["error_type"] == "validation" and fragment in r.json()["error"]


def test_info_shows_the_lexicon_the_word_level_flag_and_the_text_limits(url, cmudict):
    info = httpx.get(url + "/info", timeout=10).json()
    assert info["word_level_source"] is True
    # CMUdict's words and the words of the table of how tech words, brands and names are said (service/text/pronounced.py)
    assert info["lexicon"]["sources"] == len(set(cmudict) | set(SERVED)) and info["lexicon"]["override_file"] is None
    assert (info["max_text_chars"], info["max_words"]) == (20000, 10000)


# ---- attnserve-generate ------------------------------------------------------------------------
def test_attnserve_generate_reads_running_text_and_writes_each_answers_source(tmp_path, cmudict):
    from attnserve.service.cli import generate_main

    src = tmp_path / "lines.txt"
    src.write_text(f"hello\n{SENTENCE}\n{OOV}\n")
    out = tmp_path / "out.tsv"
    base = [str(src), "-o", str(out), "--bundle", str(DEFAULT_BUNDLE), "--threads", "1", "--no-progress"]

    def rows() -> list[list[str]]:
        return [line.split("\t") for line in out.read_text().splitlines()]

    assert generate_main(base) == 0
    assert rows()[:2] == [["hello", cmudict["hello"][0]], [SENTENCE, WORD_SEPARATOR.join(cmudict[w][0] for w in SENTENCE_WORDS)]]

    assert generate_main(base + ["--best-of", "3"]) == 0
    by_input = {}
    for r in rows():
        by_input.setdefault(r[0], []).append(r[1:])
    hello = by_input["hello"]
    assert [(rank, text, score, source) for rank, text, score, source in hello[:2]] == [
        ("1", cmudict["hello"][0], "", "lexicon"),
        ("2", cmudict["hello"][1], "", "lexicon"),
    ]
    assert hello[2][0] == "3" and hello[2][3] == "model" and float(hello[2][2]) < 0
    assert {r[3] for r in by_input[OOV]} == {"model"} and len(by_input[OOV]) == 3

    assert generate_main(base + ["--no-lexicon"]) == 0
    assert rows()[0][1] != cmudict["hello"][0]  # the model's own answer


# ---- bundles without a lexicon, or without the word-level flag --------------------------------
def test_a_text_of_more_words_than_the_request_bound_is_read_in_chunks(tiny_bundle_dir):
    with serving(tiny_bundle_dir, max_concurrent_requests=2) as s:  # tests/test_text_chunks.py: order, other requests
        r = httpx.post(s.url + "/generate", json={"inputs": "cat dog bird"}, timeout=30)
        assert r.status_code == 200 and r.json()["generated_text"].count(" | ") == 2


def test_a_bundle_without_the_word_level_flag_reads_its_input_whole(tiny_bundle_dir, tmp_path):
    whole = tmp_path / "whole"
    shutil.copytree(tiny_bundle_dir, whole)
    meta = json.loads((whole / "bundle.json").read_text())
    meta["word_level_source"] = False  # written with its manifest_sha256 anew
    write_bundle_json(whole, meta)
    with serving(tiny_bundle_dir) as word_level, serving(whole) as s:
        r = httpx.post(s.url + "/generate", json={"inputs": "hello world"}, timeout=30)
        assert r.status_code == 422 and "' '" in r.json()["error"]  # a space is still a character it cannot read
        assert httpx.get(s.url + "/info", timeout=10).json()["word_level_source"] is False
        too_long = httpx.post(s.url + "/generate", json={"inputs": "a" * 60}, timeout=30)
        assert too_long.status_code == 422, too_long.text
        assert "60 tokens long" in too_long.json()["error"] and "parameters.truncate" in too_long.json()["error"]
        cut = httpx.post(s.url + "/generate", json={"inputs": "a" * 60, "parameters": {"truncate": 48}}, timeout=30)
        assert cut.status_code == 200, cut.text  # the way out the message names works
        answer = generate(s.url, "cat")
        assert answer["details"]["words"] is None and answer["details"]["source"] == "model"
        same = generate(word_level.url, "cat")
        assert same["details"]["words"][0]["text"] == answer["generated_text"]
        del same["details"]["words"], answer["details"]["words"]
        assert same == answer
