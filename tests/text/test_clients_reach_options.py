"""Every client reaches the request options (`alphabet`, `pronunciations` in IPA with a key of two words,
`details: "words"`), as docs/API.md shows each one: raw HTTP, the openai client's `extra_body`, huggingface_hub
(`text_generation(details="words")` on the TGI route, `chat_completion(extra_body=...)` for the rest), the in-process
`Generator`, and `attnserve-generate`. Against the default model on 127.0.0.1; each must give raw HTTP's answer."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from service_harness import serving, stream

from attnserve.service.cli import generate_main
from attnserve.service.client import Generator

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
TEXT = "Hello from New York"
OPTIONS = {"alphabet": "ipa", "pronunciations": {"New York": "nˈuː jˈɔːɹk"}, "details": "words"}
EXPECTED = "həˈlo͡ʊ | ˈfɹʌm | ˈnuˈjɔɹk"  # the key's espeak-ng IPA read as phones, written in IPA; one word for two
SPANS = [(0, 5), (6, 10), (11, 19)]


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE, max_concurrent_requests=64) as s:
        yield s.url


def spans(words: list[dict]) -> list[tuple[int, int]]:
    return [(w["start"], w["end"]) for w in words]


def test_raw_http_sends_them_in_parameters(url):
    answer = httpx.post(url + "/generate", json={"inputs": TEXT, "parameters": OPTIONS}, timeout=60).json()
    assert answer["generated_text"] == EXPECTED and spans(answer["details"]["words"]) == SPANS
    status, events = stream(url + "/generate_stream", {"inputs": TEXT, "parameters": OPTIONS})
    assert status == 200 and [(e["word"]["start"], e["word"]["end"]) for e in events if "word" in e] == SPANS


def test_the_openai_client_sends_them_in_extra_body(url):
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": TEXT}], extra_body=OPTIONS)
    assert chat.choices[0].message.content == EXPECTED
    assert spans(chat.choices[0].model_extra["words"]) == SPANS
    completion = client.completions.create(model=model, prompt=TEXT, extra_body=OPTIONS)
    assert completion.choices[0].text == EXPECTED
    chunks = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": TEXT}], stream=True, extra_body=OPTIONS
    )
    found = [c.choices[0].model_extra.get("word") for c in chunks if c.choices]
    assert [(w["start"], w["end"]) for w in found if w] == SPANS


def test_huggingface_hub_reaches_details_on_the_tgi_route_and_the_rest_through_chat_completion(url):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=url)
    # text_generation has no argument for this server's extensions, but passes `details` through as it is given
    words = [(0, 5), (6, 10), (11, 14), (15, 19)]  # no override here: "New" and "York" are two words
    out = client.text_generation(TEXT, details="words")
    assert spans(out.details.words) == words and out.details.tokens is None
    events = list(client.text_generation(TEXT, details="words", stream=True))
    assert [(e.word["start"], e.word["end"]) for e in events if getattr(e, "word", None)] == words
    # chat_completion sends extra_body's fields in the body: every option
    chat = client.chat_completion([{"role": "user", "content": TEXT}], model="g2p-en", extra_body=OPTIONS)
    assert chat.choices[0].message.content == EXPECTED and spans(chat.choices[0].words) == SPANS


def test_the_generator_takes_them_as_keywords():
    with Generator(DEFAULT_BUNDLE, threads=1) as g:
        options = {k: v for k, v in OPTIONS.items() if k != "details"}
        (result,) = g.generate_text_many([TEXT], **options)
    assert result.text == EXPECTED
    assert spans(result.word_details()) == SPANS and result.word_details()[2]["word"] == "New York"


def test_attnserve_generate_takes_them_as_flags(tmp_path, capsys):
    lines, own, out = tmp_path / "in.txt", tmp_path / "own.json", tmp_path / "out.jsonl"
    lines.write_text(TEXT + "\n", encoding="utf-8")
    own.write_text(json.dumps(OPTIONS["pronunciations"], ensure_ascii=False), encoding="utf-8")
    base = [str(lines), "-o", str(out), "--bundle", str(DEFAULT_BUNDLE), "--threads", "1", "--no-progress"]
    assert generate_main([*base, "--alphabet", "ipa", "--pronunciations", str(own), "--words"]) == 0
    (line,) = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert line["text"] == EXPECTED and spans(line["words"]) == SPANS
    # a bad entry stops the run with the server's message, quoting it as given
    own.write_text(json.dumps({"New York": "nˈuː jˈɔːɹq"}, ensure_ascii=False), encoding="utf-8")
    assert generate_main([*base, "--pronunciations", str(own)]) == 2
    assert "'nˈuː jˈɔːɹq'" in capsys.readouterr().err


def test_alphabet_espeak_keeps_punctuation_by_default_on_every_route(url):
    text, marked, bare = "Hello, world.", "həlˈoʊ, wˈɜːld.", "həlˈoʊ wˈɜːld"
    model = httpx.get(url + "/v1/models", timeout=60).json()["data"][0]["id"]
    for alphabet, punctuation, expected in (("espeak", None, marked), ("espeak", False, bare), ("arpabet", None, None)):
        asked = {"alphabet": alphabet} | ({} if punctuation is None else {"punctuation": punctuation})
        tgi = httpx.post(url + "/generate", json={"inputs": text, "parameters": asked}, timeout=60).json()
        completion = httpx.post(url + "/v1/completions", json={"model": model, "prompt": text, **asked}, timeout=60).json()
        chat = httpx.post(
            url + "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": text}], **asked},
            timeout=60,
        ).json()
        answers = {tgi["generated_text"], completion["choices"][0]["text"], chat["choices"][0]["message"]["content"]}
        assert len(answers) == 1, answers
        if expected is None:  # the other alphabets keep their default: no marks
            assert not {",", "."} & set(answers.pop())
        else:
            assert answers == {expected}


def test_a_language_other_than_en_us_is_refused_on_every_route(url):
    model = httpx.get(url + "/v1/models", timeout=60).json()["data"][0]["id"]
    chat = {"model": model, "messages": [{"role": "user", "content": "Hello"}]}
    for language, ok in (("en-gb", False), ("de", False), ("en_US", True), ("en", True)):
        tgi = httpx.post(url + "/generate", json={"inputs": "Hello", "parameters": {"language": language}}, timeout=60)
        completion = httpx.post(
            url + "/v1/completions", json={"model": model, "prompt": "Hello", "language": language}, timeout=60
        )
        chatted = httpx.post(url + "/v1/chat/completions", json={**chat, "language": language}, timeout=60)
        if ok:
            assert (tgi.status_code, completion.status_code, chatted.status_code) == (200, 200, 200), tgi.text
            assert "language" not in tgi.headers.get("x-attnserve-ignored-fields", "")
            continue
        assert tgi.status_code == 422 and tgi.json()["error_type"] == "validation", tgi.text
        assert f"'{language}' is not supported" in tgi.json()["error"] and "en-us" in tgi.json()["error"]
        for answer in (completion, chatted):
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] == "language" and "en-us" in answer.json()["error"]["message"]


def test_details_sentences_gives_each_sentence_its_span_answer_and_words(url):
    text = "Dr. Smith arrived at 5 p.m. He paid $5. Really?"
    body = {"inputs": text, "parameters": {"alphabet": "espeak", "details": "sentences"}}
    answer = httpx.post(url + "/generate", json=body, timeout=60).json()
    sentences, words = answer["details"]["sentences"], answer["details"]["words"]
    assert [s["sentence"] for s in sentences] == ["Dr. Smith arrived at 5 p.m.", "He paid $5.", "Really?"]
    assert all(text[s["start"] : s["end"]] == s["sentence"] for s in sentences)
    assert [w["word"] for w in words[sentences[1]["word_start"] : sentences[1]["word_end"]]] == [
        "he",
        "paid",
        "five",
        "dollars",
        ".",
    ]
    assert sentences[1]["text"] == "hiː pˈeɪd fˈaɪv dˈɑːlɚz." and sentences[2]["text"].endswith("?")
    assert " ".join(s["text"] for s in sentences) == answer["generated_text"]  # the answer, cut at its sentences
    assert sentences[-1]["word_end"] == len(words) and answer["details"]["tokens"] is None  # as "words": no token list
    plain = httpx.post(url + "/generate", json={"inputs": text, "parameters": {"details": "words"}}, timeout=60).json()
    assert plain["details"]["sentences"] is None


def test_the_openai_routes_give_the_same_sentences_on_the_first_choice(url):
    text = "Dr. Smith arrived at 5 p.m. He paid $5. Really?"
    body = {"inputs": text, "parameters": {"alphabet": "espeak", "details": "sentences"}}
    expected = httpx.post(url + "/generate", json=body, timeout=60).json()["details"]["sentences"]
    extra = {"alphabet": "espeak", "details": "sentences", "max_tokens": 16}
    completion = {"model": "g2p-en", "prompt": text, **extra}
    chat = {"model": "g2p-en", "messages": [{"role": "user", "content": text}], **extra}
    for route, request in (("/v1/completions", completion), ("/v1/chat/completions", chat)):
        answer = httpx.post(url + route, json=request, timeout=60).json()
        (choice,) = answer["choices"]
        assert choice["sentences"] == expected, route
        assert len(choice["words"]) == expected[-1]["word_end"], route  # the words beside them, as "words" gives
        words_only = httpx.post(url + route, json={**request, "details": "words"}, timeout=60).json()
        assert "sentences" not in words_only["choices"][0] and words_only["choices"][0]["words"] == choice["words"]
