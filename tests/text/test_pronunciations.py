"""Per-request pronunciations (`parameters.pronunciations`) over HTTP on 127.0.0.1, against the default model."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_harness import serving, stream

from attnserve.service.text.reader import WORD_SEPARATOR
from attnserve.training.data import cmudict_path, parse_cmudict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
OOV = "zyxoplat"
MINE = "Z IH1 K S OW0 P L AE2 T"


@pytest.fixture(scope="module")
def cmudict() -> dict[str, list[str]]:
    return parse_cmudict(cmudict_path())


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE, max_concurrent_requests=256) as s:
        yield s.url


def post(url: str, inputs: str, client: httpx.Client | None = None, **parameters) -> httpx.Response:
    body = {"inputs": inputs, "parameters": {"details": True, **parameters}}
    return (client or httpx).post(url + "/generate", json=body, timeout=120)


def words(url: str, inputs: str, **parameters) -> list[str]:
    r = post(url, inputs, **parameters)
    assert r.status_code == 200, r.text
    return r.json()["generated_text"].split(WORD_SEPARATOR)


def test_a_pronunciation_overrides_dictionary_and_model_for_its_request_only(url, cmudict):
    entries = {"hello": "HH EH0 L OW1", OOV: MINE}
    r = post(url, f"Hello {OOV}, python", pronunciations=entries)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["generated_text"].split(WORD_SEPARATOR) == ["HH EH0 L OW1", MINE, cmudict["python"][0]]
    details = answer["details"]
    assert [w["source"] for w in details["words"]] == ["lexicon"] * 3 and details["source"] == "lexicon"
    assert all(t["logprob"] is None for t in details["tokens"])
    assert "".join(t["text"] for t in details["tokens"]) == answer["generated_text"]
    status, events = stream(url + "/generate_stream", {"inputs": f"Hello {OOV}", "parameters": {"pronunciations": entries}})
    assert status == 200 and events[-1]["generated_text"] == WORD_SEPARATOR.join(["HH EH0 L OW1", MINE])
    # the next request without it gets the dictionary's, and the model's
    assert words(url, f"Hello {OOV}")[0] == cmudict["hello"][0]
    assert words(url, f"Hello {OOV}")[1] != MINE


def test_keys_match_case_insensitively_but_an_all_caps_key_only_all_caps_words(url, cmudict):
    us = "Y UW1 EH1 S"
    assert words(url, "US us Us", pronunciations={"US": us}) == [us, cmudict["us"][0], cmudict["us"][0]]
    assert words(url, "US us Us", pronunciations={"us": us}) == [us, us, us]
    assert words(url, "HELLO Hello", pronunciations={"hello": "HH EH0 L OW1"}) == ["HH EH0 L OW1"] * 2
    # lower-case phones are accepted; the answer is the model's spelling
    assert words(url, "hello", pronunciations={"Hello": "hh eh0 l ow1"}) == ["HH EH0 L OW1"]


def test_an_acronym_the_tables_spell_is_overridden_by_a_requests_pronunciation(url, cmudict):
    assert words(url, "Which OS do you run?")[1] == "OW1 EH1 S"  # spelled_acronyms.tsv: not the bone
    assert words(url, "Which OS do you run?", pronunciations={"OS": "AA1 S"})[1] == "AA1 S"
    assert words(url, "THE OS IS DOWN")[1] == cmudict["os"][0]  # a sentence in capitals: the word


def test_a_pronunciation_in_ipa_is_written_from_its_phones(url):
    assert words(url, OOV, pronunciations={OOV: MINE}, alphabet="ipa") == ["ˈzɪkso͡ʊˌplæt"]


def test_overrides_in_arpabet_ipa_and_espeak_ipa_each_answer_as_given(url):
    arpabet = "K UW2 B ER0 N EH1 T IY0 Z"
    assert words(url, "kubernetes", pronunciations={"kubernetes": arpabet}) == [arpabet]
    # IPA as alphabet "ipa" writes it comes back as given, in either alphabet
    assert words(url, "kubernetes", pronunciations={"kubernetes": "ˌkubɚˈnɛtiz"}, alphabet="ipa") == ["ˌkubɚˈnɛtiz"]
    assert words(url, "kubernetes", pronunciations={"kubernetes": "ˌkubɚˈnɛtiz"}) == [arpabet]
    # espeak-ng's IPA (mark before the vowel, length marks, the flap) reads as the same phones
    assert words(url, "kubernetes", pronunciations={"kubernetes": "kˌuːbɚnˈɛɾiz"}) == [arpabet]
    assert words(url, "I like kubernetes", pronunciations={"kubernetes": "kˌuːbɚnˈɛɾiz"}, alphabet="ipa")[-1] == "ˌkubɚˈnɛtiz"
    # said, not detected: "sh" is ARPAbet's SH unless said to be IPA (s, h)
    assert words(url, "shh", pronunciations={"shh": "ʃ"}) == ["SH"]
    assert words(url, "shh", pronunciations={"shh": "sh"}, pronunciations_alphabet="ipa") == ["S HH"]


def test_a_key_of_two_words_answers_them_as_one_word_spanning_both(url, cmudict):
    new_york = "N UW1 Y AO1 R K"
    text = "I flew to new  York, then NEW YORK CITY"
    r = post(url, text, pronunciations={"New York": "nˈuː jˈɔːɹk", "new york city": "N UW1 Y AO1 R K S IH1 T IY0"})
    assert r.status_code == 200, r.text
    answer = r.json()
    got = answer["generated_text"].split(WORD_SEPARATOR)
    assert got == [cmudict["i"][0], cmudict["flew"][0], cmudict["to"][0], new_york, cmudict["then"][0], f"{new_york} S IH1 T IY0"]
    spans = [(w["word"], w["start"], w["end"], w["source"]) for w in answer["details"]["words"]]
    assert spans[3] == ("new  York", 10, 19, "lexicon") and text[10:19] == "new  York"
    assert spans[5] == ("NEW YORK CITY", 26, 39, "lexicon")
    # the words alone, or apart, are not the key
    assert words(url, "new cars in York", pronunciations={"New York": new_york})[0] == cmudict["new"][0]


@pytest.mark.parametrize(
    ("entries", "fragments"),
    [
        ({"hello": "HH AH L OW1"}, ["'hello': 'HH AH L OW1'", "'AH' is not", "stress digit"]),  # a vowel without its digit
        ({"hello": "hh eh0 x9 ow1"}, ["'hh eh0 x9 ow1'", "'x9' is not"]),  # quoted as given, not upper-cased
        ({"kubernetes": "kuːbɚˈnɛtiq"}, ["'kubernetes': 'kuːbɚˈnɛtiq'", "'q' at 10"]),
        ({"hello": ""}, ["'hello'"]),
        ({" ": "HH AH0 L OW1"}, ["a key is a word"]),
    ],
)
def test_a_bad_entry_is_a_422_quoting_it_as_given_and_naming_its_first_unknown_symbol(url, entries, fragments):
    r = post(url, "hello", pronunciations=entries)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_type"] == "validation" and "pronunciations" in body["error"]
    assert all(f in body["error"] for f in fragments), body["error"]


def test_openai_routes_take_pronunciations_and_answer_a_bad_one_with_400(url):
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": f"I like {OOV}"}], "pronunciations": {OOV: MINE}}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].endswith(MINE)
    r = httpx.post(url + "/v1/completions", json={"model": model, "prompt": OOV, "pronunciations": {OOV: "Q Q"}}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "pronunciations" and OOV in r.json()["error"]["message"]
    body = {"model": model, "prompt": OOV, "pronunciations": {OOV: "zɪksoʊˌplæq"}}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "pronunciations"
    assert "'zɪksoʊˌplæq'" in r.json()["error"]["message"] and "'q'" in r.json()["error"]["message"]
    body = {"model": model, "prompt": OOV, "pronunciations": {OOV: "zɪksoʊˌplæt"}, "pronunciations_alphabet": "arpabet"}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "pronunciations"
    body = {"model": model, "prompt": OOV, "pronunciations": {OOV: "zɪksoʊˌplæt"}, "alphabet": "ipa"}
    assert httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"] == "zɪkso͡ʊˌplæt"


def test_32_concurrent_clients_with_and_without_an_override_each_get_their_own(url, cmudict):
    text = f"Hello {OOV}, I read the paper"
    plain = words(url, text)
    mine = words(url, text, pronunciations={OOV: MINE, "paper": "P EY1 P ER2"})
    assert mine == [plain[0], MINE, *plain[2:-1], "P EY1 P ER2"] and plain[1] != MINE

    def one(k: int) -> tuple[int, list[str]]:
        with httpx.Client() as client:
            got = []
            for _ in range(4):
                parameters = {"pronunciations": {OOV: MINE, "paper": "P EY1 P ER2"}} if k % 2 else {}
                r = post(url, text, client, **parameters)
                assert r.status_code == 200, r.text
                got.append(r.json()["generated_text"].split(WORD_SEPARATOR))
            return k, got

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32)))
    for k, got in results:
        assert got == [mine if k % 2 else plain] * 4, k
