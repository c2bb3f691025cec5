"""alphabet "espeak": espeak-ng's en-us IPA for Piper's voices, against espeak-ng itself (piper-phonemize, the dev extra).

The table and its rules word by word, then running text through the in-process `Generator` (the server's request
layer, real ONNX Runtime, the default model), then once over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import csv
from pathlib import Path

import httpx
import pytest
from service_harness import serving, stream

from attnserve.service.client import Generator
from attnserve.service.requests.request import OutputOptions
from attnserve.service.text import espeak
from attnserve.training.data import cmudict_path, parse_cmudict

piper_phonemize = pytest.importorskip("piper_phonemize")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
PIPER_KEYS = set(piper_phonemize.get_espeak_map())

# common English words, each sent alone: the check uses another list, this one keeps the rules honest
COMMON_WORDS = """
time year people way day man thing woman life child world school state family student group country problem hand
part place case week company system program question work government number night point home water room mother area
money story fact month lot right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result change morning reason research girl
guy moment air teacher force education foot boy age policy process music market sense nation plan college interest
death experience effect class control care field development role effort rate heart drug show leader light voice
wife police mind price report decision son view relationship town road arm difference value building action model
season society tax director position player record paper space ground form event official matter center couple site
project activity star table need court oil situation cost industry figure street image phone data picture practice
piece land product doctor wall patient worker news test movie north love support technology step baby computer type
attention film tree source organization hair window evidence population truth song
""".split()


def espeak_ng(text: str) -> str:
    return " ".join("".join(s) for s in piper_phonemize.phonemize_espeak(text, "en-us"))


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


@pytest.fixture(scope="module")
def generator():
    with Generator(DEFAULT_BUNDLE, threads=1) as g:
        yield g


def read(g: Generator, text: str, **params) -> str:
    return next(g.generate_text_many([text], alphabet="espeak", **params)).text


# ---- the table, word by word ------------------------------------------------------------------
def test_every_cmudict_pronunciation_is_written_in_piper_symbols():
    for prons in parse_cmudict(cmudict_path()).values():
        for pron in prons:
            for stress in (True, False):
                text = espeak.to_espeak(pron, stress)
                assert set(text) <= PIPER_KEYS, (pron, text, set(text) - PIPER_KEYS)
                assert "\u0361" not in text and "ɝ" not in text


@pytest.mark.parametrize(
    ("arpabet", "written"),
    [
        ("AH0 T EH1 N SH AH0 N", "ɐtˈɛnʃən"),  # attention: ɐ opens it, the mark goes right before the vowel
        ("T W EH1 N T IY0", "twˈɛnti"),  # twenty: before ɛ, not before the syllable's onset tw
        ("W AO1 T ER0", "wˈɔːɾɚ"),  # water: a length mark, a flap, unstressed ER is ɚ
        ("B ER1 D", "bˈɜːd"),  # bird: stressed ER is ɜː
        ("B AH1 T AH0 N", "bˈʌʔn̩"),  # button: glottal stop and syllabic n
        ("W AA1 N T IH0 D", "wˈɑːntᵻd"),  # wanted: -ed reduces to ᵻ
        ("M AO1 R", "mˈoːɹ"),
        ("HH AH0 L OW1", "həlˈoʊ"),
        ("EH1 F B IY1 AY1", "ˌɛfbˌiːˈaɪ"),  # FBI, spelt: one primary stress, the last
        ("IH2 N S T EH1 D", "ɪnstˈɛd"),  # no secondary stress right before the primary
        ("K EH1 N Y AH0", "kˈɛnjə"),  # Kenya: a word's last Y AH0 is jə, not the juː of "argument"
    ],
)
def test_stress_goes_before_the_vowel_with_espeaks_vowels(arpabet, written):
    assert espeak.to_espeak(arpabet) == written
    assert espeak.to_espeak(arpabet, stress=False) == written.replace("ˈ", "").replace("ˌ", "")


def test_the_vowel_table_in_docs_ipa_is_the_one_the_server_uses():
    text = (ROOT / "docs" / "IPA.md").read_text(encoding="utf-8").split("### The table (service/text/espeak.py)")[1]
    rows = {}
    for line in text.split("###")[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].strip("`") in espeak.VOWELS:
            rows[cells[0].strip("`")] = cells[1]
    assert set(rows) == set(espeak.VOWELS)
    for phone, (stressed, unstressed) in espeak.VOWELS.items():
        expected = stressed if stressed == unstressed else f"{stressed} (stressed), {unstressed} ({phone}0)"
        assert rows[phone] == expected, phone


def test_function_word_table_is_what_espeak_ng_says():
    rows = list(csv.reader(espeak.FUNCTION_WORDS_TSV.open(encoding="utf-8"), delimiter="\t"))
    rows = [r for r in rows if r and not r[0].startswith("#")][1:]
    assert len(rows) > 100
    for word, alone, final, consonant, vowel in rows:
        said = "I" + word[1:] if word == "i" or word.startswith("i'") else word
        assert espeak_ng(said) == alone, word
        assert espeak_ng(f"we saw {said} dog").split()[2] == consonant, word
        assert espeak_ng(f"we saw {said} old dog").split()[2] == vowel, word
        assert espeak_ng(f"we saw {said}").split()[2] == final, word


def test_common_words_are_close_to_espeak_ng(generator):
    answers = [r.text for r in generator.generate_text_many(COMMON_WORDS, alphabet="espeak")]
    references = [espeak_ng(w) for w in COMMON_WORDS]
    errors = sum(levenshtein(a, b) for a, b in zip(answers, references))
    cer = errors / sum(len(b) for b in references)
    identical = sum(a == b for a, b in zip(answers, references)) / len(references)
    assert cer <= 0.08 and identical >= 0.6, (cer, identical)


# ---- running text -------------------------------------------------------------------------------
def test_the_before_a_vowel_reads_as_espeak_ng_reads_it(generator):
    assert read(generator, "the apple and the pear") == espeak_ng("the apple and the pear") == "ðɪ ˈæpəl ænd ðə pˈɛɹ"
    assert read(generator, "the hour").startswith("ðɪ ")  # by the next word's sound, not its letter
    assert read(generator, "the university").startswith("ðə ")


def test_monosyllabic_function_words_carry_no_primary_stress(generator):
    words = read(generator, "to us for an hour").split()
    assert [w for w in words if "ˈ" in w] == ["ˈaʊɚ"], words
    assert words[0] == "tʊ" and words[3] == "ɐn"  # "to" and "an" before a vowel, as espeak-ng says them


def test_weak_forms_leave_the_requests_own_readings_and_the_models_answers_alone(generator):
    assert read(generator, "the apple", pronunciations={"the": "DH IY1"}) == "ðˈiː ˈæpəl"
    assert read(generator, "the apple", lexicon=False).split()[0] == espeak.to_espeak(
        next(generator.generate_text_many(["the"], lexicon=False)).text
    )


def test_a_function_word_alone_is_said_in_full(generator):
    for word in ("to", "a", "the", "of", "and"):
        assert read(generator, word) == espeak_ng(word), word


def test_words_and_marks_are_joined_as_piper_joins_them(generator):
    text = "Hello, world. How are you?"
    assert read(generator, text) == "həlˈoʊ, wˈɜːld. hˌaʊ ɑːɹ juː?"  # espeak keeps the marks unless told not to
    assert read(generator, text, punctuation=True) == read(generator, text)
    assert read(generator, text, punctuation=False) == "həlˈoʊ wˈɜːld hˌaʊ ɑːɹ juː"  # words and single spaces
    assert next(generator.generate_text_many([text], alphabet="ipa")).text.count(",") == 0  # off for other alphabets
    assert read(generator, "(hello) world -- fine", punctuation=True) == "həlˈoʊ wˈɜːld fˈaɪn"  # as espeak-ng drops them


def test_a_dash_is_a_pause_and_a_run_of_marks_is_one_mark_as_espeak_ng_writes_them(generator):
    for text in ("It was late \u2014 very late.", "What?... Really.", "Hi?! There."):
        marks = [c for c in read(generator, text) if c in ".,;:!?"]
        assert marks == [c for c in espeak_ng(text) if c in ".,;:!?"], text
    assert read(generator, "It was late \u2014 very late.").split()[2].endswith(";")  # docs/IPA.md: a dash is ';'
    assert read(generator, "What?... Really.").count("?") == 1 and read(generator, "--") == ""


def test_stress_false_keeps_length_marks(generator):
    assert read(generator, "the water", stress=False) == "ðə wɔːɾɚ"


MIXED = (
    "On March 3rd, 2024, the committee paid $1,250.75 (about 40% of the budget) to 17 contractors; see "
    "https://example.com/reports/q1-2024?id=42 or mail info@example.org. They read the lead record aloud, then "
    "we will record it again and lead the team live. The zyxoplat quarbly flimbertosh wobbled past 221B Baker "
    "Street at 9:30 pm, and Dr. Smith's NASA-grade GPUs cost 3.5 million euros! Would you close the door, "
    "or is it too close to call? I can't believe it's only 12 degrees, she said -- wind the clock, then walk "
    "into the wind. "
)


def test_a_3000_word_mixed_text_is_all_piper_symbols(generator):
    line = MIXED * 6  # about 500 words a line, within the reader's limits
    lines = [line] * 6
    for punctuation in (False, True):
        answers = [r.text for r in generator.generate_text_many(lines, alphabet="espeak", punctuation=punctuation)]
        words = sum(len(a.split()) for a in answers)
        assert words >= 3000
        outside = {c for a in answers for c in a if c not in PIPER_KEYS}
        assert not outside, outside


def test_a_word_is_written_alike_from_its_token_ids_and_from_its_answer_text(generator):
    form = generator.requests.output_form(OutputOptions(alphabet="espeak"))
    tokenizer = generator.engine.tgt_tokenizer
    for pron in ("AH0 T EH1 N SH AH0 N", "B AH1 T AH0 N", "W AO1 T ER0", "EH1 F B IY1 AY1"):
        ids = tokenizer.encode(pron, add_special_tokens=False).ids
        assert form.spoken(pron) == form.text(ids) == "".join(form.texts(ids)) == espeak.to_espeak(pron)
        assert form.spoken(pron, link=True) == form.text(ids, link=True) == espeak.to_espeak(pron) + "ɹ"


def test_attnserve_generate_writes_espeak(tmp_path):
    from attnserve.service.cli import generate_main

    words = tmp_path / "words.txt"
    words.write_text("attention\nthe apple and the pear\n")
    out = tmp_path / "out.tsv"
    argv = [str(words), "-o", str(out), "--bundle", str(DEFAULT_BUNDLE), "--threads", "1", "--alphabet", "espeak"]
    assert generate_main(argv) == 0
    assert out.read_text().splitlines() == ["attention\tɐtˈɛnʃən", "the apple and the pear\tðɪ ˈæpəl ænd ðə pˈɛɹ"]


# ---- over HTTP -----------------------------------------------------------------------------------
def test_espeak_over_http_tokens_and_stream_concatenate_to_the_answer():
    text = "The apple and the zyxoplat, to us for an hour."
    parameters = {"alphabet": "espeak", "punctuation": True, "details": True}
    with serving(DEFAULT_BUNDLE) as s:
        r = httpx.post(s.url + "/generate", json={"inputs": text, "parameters": parameters}, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["generated_text"].startswith("ðɪ ˈæpəl ænd ðə ")
        assert body["generated_text"].endswith(", tʊ ˌʌs fɔːɹ ɐn ˈaʊɚ.")
        assert "".join(t["text"] for t in body["details"]["tokens"]) == body["generated_text"]
        status, events = stream(s.url + "/generate_stream", {"inputs": text, "parameters": parameters})
        assert status == 200
        assert "".join(e["token"]["text"] for e in events) == body["generated_text"] == events[-1]["generated_text"]
        model = httpx.get(s.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        r = httpx.post(s.url + "/v1/completions", json={"model": model, "prompt": "the apple", "alphabet": "espeak"}, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == "ðɪ ˈæpəl"
        r = httpx.post(s.url + "/generate", json={"inputs": "hi", "parameters": {"alphabet": "espeek"}}, timeout=30)
        assert r.status_code == 422 and "alphabet" in r.json()["error"]
