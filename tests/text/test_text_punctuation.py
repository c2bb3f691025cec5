"""`punctuation: true` keeps sentence and phrase punctuation as its own tokens between the words' answers (so a TTS
engine can place pauses), on the TGI routes, the OpenAI routes (an extra body field) and in process; the default
keeps the answer as it was. A real uvicorn server on 127.0.0.1 serving the default model."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from service_harness import serving, stream

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
TEXT = "Hello, world! Dr. Smith said: wait... (really?) yes — no."
MARKS = [",", "!", ":", "...", "(", "?)", "-", "."]


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE) as s:
        yield s.url


def generate(url: str, inputs: str, **parameters) -> dict:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_punctuation_is_kept_between_the_words_when_asked(url):
    plain = generate(url, TEXT)
    kept = generate(url, TEXT, punctuation=True)
    words = kept["details"]["words"]
    marks = [w for w in words if w["source"] == "punctuation"]
    assert [m["word"] for m in marks] == [m["text"] for m in marks] == MARKS  # the stop of "Dr." is not a pause
    assert [TEXT[m["start"] : m["end"]] for m in marks] == [",", "!", ":", "...", "(", "?)", "\u2014", "."]
    assert [w for w in words if w["source"] != "punctuation"] == plain["details"]["words"]
    assert kept["generated_text"] == (
        "HH AH0 L OW1 | , | W ER1 L D | ! | D AA1 K T ER0 | S M IH1 TH | S EH1 D | : | W EY1 T | ... | ( | R IH1 L IY0 | ?) "
        "| Y EH1 S | - | N OW1 | ."
    )
    assert "".join(t["text"] for t in kept["details"]["tokens"]) == kept["generated_text"]
    assert kept["details"]["source"] == "lexicon"  # marks do not make a text the model's


def test_the_default_keeps_the_answer_without_punctuation(url):
    plain = generate(url, TEXT)
    assert all(w["source"] != "punctuation" for w in plain["details"]["words"])
    assert plain == generate(url, TEXT, punctuation=False)
    assert "," not in plain["generated_text"] and "!" not in plain["generated_text"]


def test_a_stream_with_punctuation_concatenates_to_the_answer(url):
    text = "Hello, zyxoplat!"  # a model word between two marks
    expected = generate(url, text, punctuation=True)
    status, events = stream(url + "/generate_stream", {"inputs": text, "parameters": {"punctuation": True}})
    assert status == 200
    assert "".join(e["token"]["text"] for e in events) == expected["generated_text"] == events[-1]["generated_text"]
    assert expected["generated_text"].endswith(" | !") and " | , | " in expected["generated_text"]


@pytest.mark.parametrize("inputs", ["--", "...", "?!"])
def test_punctuation_alone_answers_no_words_on_every_route(url, inputs):
    """An LLM's stream sends such chunks: they are read, as no words, not refused."""
    for parameters in ({}, {"punctuation": True}, {"alphabet": "espeak"}):
        answer = generate(url, inputs, **parameters)
        assert [w for w in answer["details"]["words"] if w["source"] != "punctuation"] == []
        assert answer["details"]["warnings"] is None
        kept = "".join(t["text"] for t in answer["details"]["tokens"])
        assert kept == answer["generated_text"] and all(c in ".?!-;" for c in kept)
        status, events = stream(url + "/generate_stream", {"inputs": inputs, "parameters": parameters})
        assert status == 200 and events[-1]["generated_text"] == answer["generated_text"]
    assert generate(url, inputs)["generated_text"] == ""
    body = {"model": "g2p-en", "prompt": inputs}
    r = httpx.post(url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "", r.text
    events = openai_stream(url + "/v1/completions", {**body, "stream": True})
    assert "".join(c["text"] for e in events for c in e["choices"]) == ""
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["stop"]
    chat = {"model": "g2p-en", "messages": [{"role": "user", "content": inputs}]}
    r = httpx.post(url + "/v1/chat/completions", json=chat, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "", r.text
    events = openai_stream(url + "/v1/chat/completions", {**chat, "stream": True})
    assert "".join(c["delta"].get("content") or "" for e in events for c in e["choices"]) == ""
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["stop"]


def openai_stream(url: str, body: dict) -> list[dict]:
    """An OpenAI route's streamed chunks, having checked the stream is a 200 that ends with data: [DONE]."""
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data:") :]) for line in lines[:-1]]


def test_characters_that_cannot_be_read_and_nothing_else_are_still_refused(url):
    r = httpx.post(url + "/generate", json={"inputs": "... \U0001f600 !", "parameters": {"punctuation": True}}, timeout=30)
    assert r.status_code == 422 and "no words" in r.json()["error"] and "\U0001f600" in r.json()["error"]


def test_the_openai_routes_take_punctuation_as_an_extra_body_field(url):
    body = {"model": "g2p-en", "prompt": "Hello, world!", "punctuation": True}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "HH AH0 L OW1 | , | W ER1 L D | !"
    chat = {"model": "g2p-en", "messages": [{"role": "user", "content": "Hello, world!"}], "punctuation": True}
    r = httpx.post(url + "/v1/chat/completions", json=chat, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "HH AH0 L OW1 | , | W ER1 L D | !"
    del body["punctuation"]
    assert httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"] == "HH AH0 L OW1 | W ER1 L D"


def test_the_in_process_client_keeps_punctuation_alike():
    from attnserve.service.client import Generator

    with Generator(DEFAULT_BUNDLE, threads=1) as g:
        kept, plain = (next(g.generate_text_many(["Hello, world!"], punctuation=p)) for p in (True, False))
    assert kept.text == "HH AH0 L OW1 | , | W ER1 L D | !" and kept.words == ["hello", ",", "world", "!"]
    assert kept.answers[1][0].source == "punctuation"
    assert plain.text == "HH AH0 L OW1 | W ER1 L D"
