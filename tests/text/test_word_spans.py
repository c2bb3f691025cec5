"""Word spans, light (`details: "words"`): the words with their spans, readings and sources without the per-token
list, and on streams the event that completes a word carrying its index and span; over HTTP on 127.0.0.1 against
the default model (word-level, with a lexicon, so both the lexicon and the model answer words)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from service_harness import serving, stream

from attnserve.service.text.reader import WORD_SEPARATOR

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
SENTENCES = [
    "On 3 May 2024 the zyxoplat committee met in New York, and Dr. Smith paid $3.50 for 12 blorfing widgets.",
    "I read the paper yesterday; they record a new record at 10:30 am, with 2,500 people from the US watching.",
    "Kubernetes clusters, quenthrax engines and the 21st floor of https://example.com were all discussed at length.",
    'She said: "Don\'t stop!" and then walked 5km north to the old mill, where glimbrous birds sang.',
]
TEXT = " ".join(SENTENCES * 3)  # about 220 words as read: lexicon words, the model's made-up words, numbers, a URL


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE, max_concurrent_requests=256) as s:
        yield s.url


def generate(url: str, inputs: str, **parameters) -> dict:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": parameters}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_details_words_gives_the_words_of_details_true_without_the_token_list(url):
    full = generate(url, TEXT, details=True)
    light = generate(url, TEXT, details="words")
    assert light["generated_text"] == full["generated_text"]
    words = light["details"]["words"]
    assert len(words) >= 200 and words == full["details"]["words"]
    assert {w["source"] for w in words} >= {"lexicon", "model"}
    assert all(TEXT[w["start"] : w["end"]] for w in words)
    assert light["details"]["tokens"] is None and full["details"]["tokens"]
    for name in ("finish_reason", "generated_tokens", "score", "source", "seed"):
        assert light["details"][name] == full["details"][name], name
    assert len(json.dumps(light)) < len(json.dumps(full)) / 2
    # in another alphabet the words' texts are in it, the spans the same
    ipa = generate(url, TEXT, details="words", alphabet="ipa")["details"]["words"]
    assert [(w["start"], w["end"]) for w in ipa] == [(w["start"], w["end"]) for w in words]
    assert ipa[0]["text"] != words[0]["text"]


@pytest.mark.parametrize("parameters", [{}, {"alphabet": "ipa"}, {"punctuation": True, "stress": False}])
def test_a_streamed_200_word_text_carries_each_words_index_and_span_as_details_words_has_them(url, parameters):
    expected = generate(url, TEXT, details="words", **parameters)
    words = expected["details"]["words"]
    status, events = stream(url + "/generate_stream", {"inputs": TEXT, "parameters": {"details": "words", **parameters}})
    assert status == 200
    assert events[-1]["generated_text"] == expected["generated_text"]
    marked = [(k, e) for k, e in enumerate(events) if "word" in e]
    assert [e["word"] for _, e in marked] == [{"index": i, "start": w["start"], "end": w["end"]} for i, w in enumerate(words)]
    # each word's span comes on the event that completes it: the text so far is the words so far
    texts = [w["text"] for w in words]
    for k, e in marked:
        so_far = "".join(ev["token"]["text"] for ev in events[: k + 1])
        assert so_far == WORD_SEPARATOR.join(texts[: e["word"]["index"] + 1])


def test_streams_without_details_words_are_unchanged(url):
    for details in (False, True):
        status, events = stream(url + "/generate_stream", {"inputs": SENTENCES[0], "parameters": {"details": details}})
        assert status == 200 and not any("word" in e for e in events)
        assert set(events[0]) == {"index", "token", "top_tokens", "generated_text", "details"}


def openai_stream(url: str, body: dict) -> list[dict]:
    chunks = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
    return chunks


def test_openai_routes_give_the_words_and_their_spans_on_the_answer_and_the_stream(url):
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    words = generate(url, TEXT, details="words")["details"]["words"]
    body = {"model": model, "messages": [{"role": "user", "content": TEXT}], "details": "words"}
    whole = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
    assert whole["choices"][0]["words"] == words
    plain = httpx.post(url + "/v1/completions", json={"model": model, "prompt": TEXT}, timeout=120).json()
    assert "words" not in plain["choices"][0]
    chunks = openai_stream(url, {**body, "stream": True})
    spans = [c["choices"][0]["word"] for c in chunks if c["choices"] and "word" in c["choices"][0]]
    assert spans == [{"index": i, "start": w["start"], "end": w["end"]} for i, w in enumerate(words)]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert content == whole["choices"][0]["message"]["content"]
    assert not any("word" in c["choices"][0] for c in openai_stream(url, {**body, "stream": True, "details": None}))
