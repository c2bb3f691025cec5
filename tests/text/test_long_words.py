"""No word is cut short, and none refuses a text: a word longer than the model reads is read in parts, a long word
whose model reading ends implausibly early is read again in parts, and either stays one word of the answer (one
`|`-separated field, one `details.words` entry, one run of the stream), named in `details.warnings`.

The splitting and the threshold are tested alone (service/text/parts.py); the rest runs the default bundle through
the in-process Generator (the request layer every front end shares) and once over HTTP (real uvicorn on 127.0.0.1).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest
from service_harness import read_one as one
from service_harness import serving

from attnserve.service.client import InputError
from attnserve.service.text.parts import MIN_PHONES_PER_LETTER, MIN_SHARE_OF_PARTS, split_word, stopped_early

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
PNEUMO = "Pneumonoultramicroscopicsilicovolcanoconiosis"  # 45 letters
SUPERCAL = "supercalifragilisticexpialidocious"
LLAN = "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch"  # 58 letters: over the model's 48 positions


# ---- the parts and the threshold, alone -------------------------------------------------------------------------
def test_a_word_splits_at_dictionary_words_and_combining_forms():
    known = {"ultra", "microscopic", "volcano"}
    assert split_word(PNEUMO.lower(), known) == ["pneumono", "ultra", "microscopic", "silico", "volcano", "coniosis"]


def test_a_word_no_table_names_is_cut_by_length_and_concatenates_back():
    word = "xkcdqwrtzxkcdqwrtzxkcdqwrtz"
    parts = split_word(word, set())
    assert "".join(parts) == word and len(parts) >= 3 and all(2 <= len(p) <= 10 for p in parts)
    assert "".join(split_word(LLAN, set(), max_part=48)) == LLAN


def test_the_threshold_is_the_lexicons_first_percentile_of_phonemes_per_letter():
    ratios = []
    with gzip.open(DEFAULT_BUNDLE / "lexicon.tsv.gz", "rt") as f:
        for line in f:
            word, phones = line.rstrip("\n").split("\t")[:2]
            n = sum(c.isalpha() for c in word)
            if n >= 10:
                ratios.append(len(phones.split()) / n)
    ratios.sort()
    below = sum(r < MIN_PHONES_PER_LETTER for r in ratios) / len(ratios)
    assert 0.005 <= below <= 0.02  # about one real reading in a hundred is below it
    assert stopped_early(PNEUMO, 5) and not stopped_early(PNEUMO, 30) and not stopped_early("through", 1)


def test_a_compounds_threshold_is_the_first_percentile_of_its_phonemes_over_its_dictionary_parts():
    lexicon: dict[str, str] = {}
    with gzip.open(DEFAULT_BUNDLE / "lexicon.tsv.gz", "rt") as f:
        for line in f:
            word, phones = line.rstrip("\n").split("\t")[:2]
            lexicon.setdefault(word, phones)
    known, ratios = set(lexicon), []
    for word, phones in lexicon.items():
        if len(word) < 10 or not word.isalpha():
            continue
        known.discard(word)  # the word's parts, not the word itself
        parts = split_word(word, known)
        known.add(word)
        if len(parts) >= 2 and all(p in lexicon for p in parts):
            ratios.append(len(phones.split()) / sum(len(lexicon[p].split()) for p in parts))
    below = sum(r < MIN_SHARE_OF_PARTS for r in ratios) / len(ratios)
    assert len(ratios) > 5000 and 0.005 <= below <= 0.02, (len(ratios), below)
    word = "hyperparameteroptimization"  # 16 phonemes: above 0.60 a letter, short of its parts' 22
    assert not stopped_early(word, 16) and stopped_early(word, 16, 22) and not stopped_early(word, 21, 22)


# ---- through the request layer ----------------------------------------------------------------------------------
def test_a_compound_whose_reading_stops_short_of_its_parts_is_read_in_parts_and_named(gen):
    r = one(gen, "hyperparameteroptimization")
    assert len(r.answers[0][0].text.split()) >= 21 and r.answers[0][0].source == "parts"
    (w,) = r.warnings
    assert "its dictionary parts read" in w.message and "the parts' reading is kept" in w.message


def test_a_45_letter_word_answers_at_least_30_phonemes_and_is_named(gen):
    r = one(gen, f"a {PNEUMO} case")
    assert len(r.answers) == 3 and r.text.count(" | ") == 2  # still one word of the answer
    assert len(r.answers[1][0].text.split()) >= 30 and r.answers[1][0].source == "parts"
    (w,) = r.warnings
    assert (w.start, w.end, w.text) == (2, 47, PNEUMO) and "ended after" in w.message


def test_a_word_that_stops_short_is_read_on(gen):
    r = one(gen, SUPERCAL)
    phones = r.answers[0][0].text.split()
    assert len(phones) >= MIN_PHONES_PER_LETTER * len(SUPERCAL) and phones[-3:] == ["SH", "AH0", "S"]


def test_a_request_for_the_models_own_answers_keeps_its_reading(gen):
    own = one(gen, SUPERCAL, lexicon=False)
    assert own.answers[0][0].source == "model" and not own.warnings
    assert own.answers[0][0].text != one(gen, SUPERCAL).answers[0][0].text


def test_a_word_longer_than_the_model_reads_does_not_refuse_the_text(gen):
    text = ("The village of " + LLAN + " is in Wales. ") * 40  # about 3,000 characters
    r = one(gen, text)
    assert len(text) > 3000 and len(r.warnings) == 40 and all("at most 48" in w.message for w in r.warnings)
    long_answers = [a[0] for w, a in zip(r.words, r.answers) if w == LLAN.lower()]
    assert len(long_answers) == 40 and len({a.text for a in long_answers}) == 1  # the same wherever it stands
    assert len(long_answers[0].text.split()) >= 30 and long_answers[0].source == "parts"


def test_a_run_of_letters_far_longer_than_any_word_is_read_as_one_word(gen):
    run = "blorp" * 120  # 600 letters: cut by length, no dictionary search
    r = one(gen, f"see {run} now")
    assert r.text.count(" | ") == 2 and r.answers[1][0].source == "parts" and len(r.warnings) == 1
    assert len(split_word(run, set())) == 60


def test_a_long_words_answer_does_not_depend_on_its_text_or_on_the_model_answering_its_neighbours(gen):
    alone = one(gen, LLAN).answers[0][0].text
    among = one(gen, f"zorblat {LLAN} quexnip {PNEUMO}", lexicon=False)
    assert one(gen, LLAN, lexicon=False).answers[0][0].text == among.answers[1][0].text
    assert alone == one(gen, f"Hello {LLAN}!").answers[1][0].text


def test_sampled_and_beam_requests_read_a_long_word_in_parts(gen):
    sampled = [one(gen, f"to {LLAN}", do_sample=True, seed=7, temperature=0.8).text for _ in range(2)]
    assert sampled[0] == sampled[1] and sampled[0].count(" | ") == 1  # seeded: reproducible, still two words
    beams = one(gen, f"to {LLAN}", best_of=2)
    assert len(beams.answers) == 2 and beams.answers[1][0].source == "parts"


def test_a_checked_word_whose_reading_is_kept_keeps_its_beams(gen):
    beams = one(gen, "glorbinating", best_of=2)
    assert [a.source for a in beams.answers[0]] == ["model", "model"] and not beams.warnings
    assert beams.answers[0][0].text == one(gen, "glorbinating", lexicon=False).answers[0][0].text


def test_stray_quotes_backticks_and_dashes_refuse_nothing(gen):
    r = one(gen, "``Hello'' -- she said \u2014 `run` ' \" ... -- \u2013 (ok)")
    assert r.words == ["hello", "she", "said", "run", "ok"]


def test_score_names_what_to_do_with_an_over_long_word(gen):
    with pytest.raises(InputError, match="score its parts"):
        gen.score(LLAN, ["L AE1 N"])
    assert gen.score("cat", ["K AE1 T"])[0].total < 0


# ---- over HTTP ----------------------------------------------------------------------------------------------------
def test_over_http_a_long_word_is_one_word_in_the_answer_the_details_and_the_stream():
    text = f"Visit {LLAN} or read {PNEUMO}."
    with serving(DEFAULT_BUNDLE) as s, httpx.Client(timeout=60) as c:
        body = c.post(s.url + "/generate", json={"inputs": text, "parameters": {"details": True}}).json()
        with c.stream("POST", s.url + "/generate_stream", json={"inputs": text}) as r:
            events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
        tokens = [t["text"] for t in body["details"]["tokens"]]
        openai_body = {"model": "g2p-en", "prompt": text, "stream": True}
        with c.stream("POST", s.url + "/v1/completions", json=openai_body) as r:
            chunks = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
        alone = c.post(s.url + "/generate", json={"inputs": SUPERCAL, "parameters": {"details": True}}).json()
    fields = body["generated_text"].split(" | ")
    words = body["details"]["words"]
    assert len(fields) == len(words) == 5 and [w["source"] for w in words][1::3] == ["parts", "parts"]
    assert [w["text"] for w in words] == fields and "".join(tokens) == body["generated_text"]
    assert [(w["start"], w["end"]) for w in body["details"]["warnings"]] == [(6, 64), (73, 118)]
    assert "".join(e["token"]["text"] for e in events) == events[-1]["generated_text"] == body["generated_text"]
    streamed = "".join(json.loads(x)["choices"][0]["text"] for x in chunks if x != "[DONE]")
    assert streamed == body["generated_text"]
    assert alone["details"]["source"] == "parts" and len(alone["details"]["warnings"]) == 1
