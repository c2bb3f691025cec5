"""Output forms (`parameters.alphabet`, `parameters.stress`): the IPA table and its syllables, then over HTTP on 127.0.0.1
against the default model (models/g2p-en), on the TGI routes, the OpenAI routes and in process."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest
from service_harness import serving, stream

from attnserve.service.text.ipa import to_arpabet, to_ipa
from attnserve.service.text.reader import WORD_SEPARATOR
from attnserve.training.data import cmudict_path, parse_cmudict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
OOVS = ["zyxoplat", "quarbly", "flimbertosh"]  # in no dictionary: the model answers them, token by token when streamed


@pytest.fixture(scope="module")
def cmudict() -> dict[str, list[str]]:
    return parse_cmudict(cmudict_path())


@pytest.fixture(scope="module")
def url():
    # room for the 1,000-word text of the round trip
    with serving(DEFAULT_BUNDLE, max_words=2000, max_text_chars=40000) as s:
        yield s.url


def generate(url: str, inputs: str, **parameters) -> dict:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def texts(tokens: list[dict]) -> str:
    return "".join(t["text"] for t in tokens)


# ---- the table --------------------------------------------------------------------------------
def test_every_cmudict_pronunciation_reads_back_from_its_ipa(cmudict):
    for prons in cmudict.values():
        for pron in prons:
            phones = pron.split()
            assert to_arpabet(to_ipa(phones)) == phones, pron
            assert to_arpabet(to_ipa(phones, stress=False), stress=False) == [p.rstrip("012") for p in phones], pron


@pytest.mark.parametrize(
    ("arpabet", "ipa"),
    [
        ("AH0 T EH1 N SH AH0 N", "əˈtɛnʃən"),  # attention: T is the onset of the stressed syllable
        ("EH1 K S T R AH0", "ˈɛkstɹə"),  # extra: S T R is a legal onset, K S T R is not, so ɛk.stɹə
        ("D IH0 S P L EY1", "dɪˈsple͡ɪ"),  # display: S P L
        ("AE1 T L AH0 S", "ˈætləs"),  # atlas: T L is no onset, so æt.ləs (the mark is before æ)
        ("HH AH1 N D R AH0 D", "ˈhʌndɹəd"),  # hundred: D R onset, N stays
        ("P R OW0 N AH2 N S IY0 EY1 SH AH0 N", "pɹo͡ʊˌnʌnsiˈe͡ɪʃən"),  # secondary stress mark
        ("D R AO1 IH0 NG", "ˈdɹɔɪŋ"),  # drawing: AO IH, not the tied OY ɔ͡ɪ
        ("ER1 TH ER0", "ˈɝθɚ"),
    ],
)
def test_stress_mark_goes_before_the_maximal_onset_of_its_syllable(arpabet, ipa):
    assert to_ipa(arpabet) == ipa
    assert to_arpabet(ipa) == arpabet.split()


# ---- over HTTP --------------------------------------------------------------------------------
def thousand_word_text(cmudict: dict[str, list[str]]) -> str:
    """1,000 words of made-up prose: dictionary words, some numbers and a few unknown words, with punctuation."""
    rng = random.Random(36)
    vocabulary = sorted(w for w in cmudict if w.isalpha() and w.isascii() and 3 <= len(w) <= 10)
    words = []
    while len(words) < 1000:
        k = len(words)
        if k % 97 == 5:
            words.append(OOVS[k % len(OOVS)])
        elif k % 53 == 7:
            words.append(str(rng.randint(2, 99)))
        else:
            words.append(rng.choice(vocabulary))
        if k % 12 == 11:
            words[-1] += rng.choice([",", ".", ";"])
    return " ".join(words)


def test_ipa_of_a_1000_word_text_maps_back_to_the_arpabet_answer_word_for_word(url, cmudict):
    text = thousand_word_text(cmudict)
    arpabet = generate(url, text)
    ipa = generate(url, text, alphabet="ipa")
    bare = generate(url, text, alphabet="ipa", stress=False)
    want = [w.split() for w in arpabet["generated_text"].split(WORD_SEPARATOR)]
    assert len(want) >= 1000
    assert [to_arpabet(w) for w in ipa["generated_text"].split(WORD_SEPARATOR)] == want
    assert [to_arpabet(w, stress=False) for w in bare["generated_text"].split(WORD_SEPARATOR)] == [
        [p.rstrip("012") for p in w] for w in want
    ]
    # the same words, at the same places in the input, from the same sources
    where = [(w["start"], w["end"], w["source"]) for w in arpabet["details"]["words"]]
    assert [(w["start"], w["end"], w["source"]) for w in ipa["details"]["words"]] == where
    assert [w["text"] for w in ipa["details"]["words"]] == ipa["generated_text"].split(WORD_SEPARATOR)


def test_ipa_tokens_keep_their_ids_and_concatenate_to_the_answer(url):
    text = f"Hello, {OOVS[0]}! I have 2 {OOVS[1]}."
    arpabet = generate(url, text)["details"]
    answer = generate(url, text, alphabet="ipa")
    tokens = answer["details"]["tokens"]
    assert texts(tokens) == answer["generated_text"]
    assert [(t["id"], t["logprob"], t["special"]) for t in tokens] == [
        (t["id"], t["logprob"], t["special"]) for t in arpabet["tokens"]
    ]
    assert answer["generated_text"].split(WORD_SEPARATOR)[0] == "həˈlo͡ʊ"  # hello: HH AH0 L OW1
    assert [t["text"] for t in tokens[:4]] == ["h", "ə", "ˈl", "o͡ʊ"]  # the mark rides on the syllable's first phone


@pytest.mark.parametrize("parameters", [{"alphabet": "ipa"}, {"alphabet": "ipa", "stress": False}, {"stress": False}])
def test_stream_in_each_form_concatenates_to_the_whole_answer(url, parameters):
    text = f"attention {OOVS[2]}, 2 {OOVS[0]}"
    whole = generate(url, text, **parameters)
    status, events = stream(url + "/generate_stream", {"inputs": text, "parameters": {"details": True, **parameters}})
    assert status == 200, events
    assert texts([e["token"] for e in events]) == whole["generated_text"] == events[-1]["generated_text"]
    assert [e["token"]["id"] for e in events] == [t["id"] for t in whole["details"]["tokens"]]
    assert [e["token"]["text"] for e in events] == [t["text"] for t in whole["details"]["tokens"]]


def test_stress_false_drops_arpabets_digits_and_ipas_marks(url, cmudict):
    arpabet = generate(url, "attention", stress=False)
    assert arpabet["generated_text"] == "AH T EH N SH AH N"
    assert texts(arpabet["details"]["tokens"]) == arpabet["generated_text"]
    assert generate(url, "attention", alphabet="ipa", stress=False)["generated_text"] == "ətɛnʃən"
    assert generate(url, "attention", alphabet="ipa")["generated_text"] == "əˈtɛnʃən"
    assert generate(url, "attention", alphabet="arpabet", stress=True)["generated_text"] == cmudict["attention"][0]


def test_alternatives_of_top_n_tokens_are_written_in_the_form(url):
    answer = generate(url, OOVS[0], alphabet="ipa", top_n_tokens=2)["details"]
    assert all(len(step) == 2 for step in answer["top_tokens"])
    symbols = {t["text"] for step in answer["top_tokens"] for t in step if not t["special"]}
    assert symbols
    assert not any(c.isupper() or c.isdigit() for s in symbols for c in s)  # IPA, not ARPAbet


def test_a_bad_alphabet_is_a_422_naming_it(url):
    r = httpx.post(url + "/generate", json={"inputs": "hello", "parameters": {"alphabet": "x-sampa"}}, timeout=30)
    assert r.status_code == 422 and "alphabet" in r.json()["error"]


# ---- the OpenAI routes and the in-process client ------------------------------------------------
def test_openai_routes_take_alphabet_and_stress_as_extra_body_fields(url):
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    ipa = generate(url, f"Hello {OOVS[0]}", alphabet="ipa", top_n_tokens=1)["generated_text"]  # logprobs: the model's own
    r = httpx.post(
        url + "/v1/completions",
        json={"model": model, "prompt": f"Hello {OOVS[0]}", "alphabet": "ipa", "logprobs": 1},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == ipa
    offsets, tokens = choice["logprobs"]["text_offset"], choice["logprobs"]["tokens"]
    assert [ipa[o : o + len(t)] for o, t in zip(offsets, tokens)] == tokens  # offsets into the IPA text
    body = {"model": model, "messages": [{"role": "user", "content": f"attention {OOVS[1]}"}], "stress": False}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == generate(url, f"attention {OOVS[1]}", stress=False)["generated_text"]
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "alphabet": "ipa", "stream": True}, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert streamed == generate(url, f"attention {OOVS[1]}", alphabet="ipa", stress=False)["generated_text"]
    r = httpx.post(url + "/v1/completions", json={"model": model, "prompt": "x", "alphabet": "sampa"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "alphabet"


def test_generator_answers_in_the_form_asked_for(url):
    from attnserve.service.client import Generator

    with Generator(DEFAULT_BUNDLE, threads=1) as g:
        [ipa, bare] = [next(g.generate_text_many(["Hello attention"], alphabet="ipa", stress=s)) for s in (True, False)]
        assert ipa.text == generate(url, "Hello attention", alphabet="ipa")["generated_text"]
        assert bare.text == "həlo͡ʊ | ətɛnʃən"


def test_the_table_in_docs_ipa_is_the_one_the_server_uses():
    from attnserve.service.text.ipa import CONSONANTS, VOWEL_BY_STRESS, VOWELS

    rows = {}
    ipa_part = (ROOT / "docs" / "IPA.md").read_text().split('## alphabet "espeak"')[0]  # espeak's table is its own
    for line in ipa_part.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].strip("`") in {**VOWELS, **CONSONANTS}:
            rows[cells[0].strip("`")] = cells[1]
    assert set(rows) == set(VOWELS) | set(CONSONANTS)
    for phone, symbol in {**VOWELS, **CONSONANTS}.items():
        unstressed = VOWEL_BY_STRESS.get((phone, "0"))
        assert rows[phone] == (f"{symbol} (stressed), {unstressed} ({phone}0)" if unstressed else symbol), phone


def test_attnserve_generate_writes_the_form_asked_for(tmp_path, capsys):
    from attnserve.service.cli import generate_main

    words = tmp_path / "words.txt"
    words.write_text("attention\nHello world\n")
    out = tmp_path / "out.tsv"
    assert (
        generate_main([str(words), "-o", str(out), "--bundle", str(DEFAULT_BUNDLE), "--threads", "1", "--alphabet", "ipa"]) == 0
    )
    assert out.read_text().splitlines() == ["attention\təˈtɛnʃən", "Hello world\thəˈlo͡ʊ | ˈwɝld"]
    assert generate_main([str(words), "-o", str(out), "--bundle", str(DEFAULT_BUNDLE), "--threads", "1", "--no-stress"]) == 0
    assert out.read_text().splitlines()[0] == "attention\tAH T EH N SH AH N"
