"""What a first visit meets: a browser opening `/` lands on the demo page (TGI's `POST /` unchanged), and a stream's
token texts follow one rule with its top_tokens' texts."""

from __future__ import annotations

import httpx
import pytest
from service_harness import ROOT, serving, stream


@pytest.fixture(scope="module")
def url():
    with serving(ROOT / "models" / "g2p-en") as server:
        yield server.url


def test_a_browser_opening_the_root_is_sent_to_the_demo_page(url):
    html = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what a browser sends
    r = httpx.get(url + "/", headers={"accept": html}, timeout=10)
    assert r.status_code == 307 and r.headers["location"] == "/demo"
    page = httpx.get(url + "/", headers={"accept": html}, timeout=10, follow_redirects=True)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


def test_an_api_client_get_of_the_root_is_still_method_not_allowed(url):
    r = httpx.get(url + "/", headers={"accept": "application/json"}, timeout=10)
    assert r.status_code == 405 and r.json()["error_type"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"


def test_tgi_post_root_is_unchanged(url):
    r = httpx.post(url + "/", json={"inputs": "attention", "stream": False}, timeout=30)
    assert r.status_code == 200 and r.json() == [{"generated_text": "AH0 T EH1 N SH AH0 N", "details": None}]


def test_the_root_is_not_in_the_api_schema_as_a_get(url):
    assert set(httpx.get(url + "/openapi.json", timeout=10).json()["paths"]["/"]) == {"post"}


def chosen_alternative(token: dict, top: list[dict]) -> dict:
    return next(t for t in top if t["id"] == token["id"])


@pytest.mark.parametrize("inputs", ["attention", "zyxoplat", "hello zyxoplat world"])  # one word, and running text
def test_a_stream_token_and_its_top_tokens_entry_have_the_same_text(url, inputs):
    body = {"inputs": inputs, "parameters": {"top_n_tokens": 3, "lexicon": False, "max_new_tokens": 20}}
    status, events = stream(url + "/generate_stream", body)
    assert status == 200, events
    for event in events:
        token, top = event["token"], event["top_tokens"]
        if token["id"] in {t["id"] for t in top}:
            assert chosen_alternative(token, top)["text"] == token["text"], event
    texts = [e["token"]["text"] for e in events]
    assert "".join(texts) == events[-1]["generated_text"]
    assert any(t.startswith(" ") for t in texts[1:]), texts  # later phonemes carry the space before them
    for event in events[1:]:  # the same rule for the alternatives: each says what it would add at its step
        assert all(t["special"] or t["text"].startswith(" ") for t in event["top_tokens"]), event


def test_details_top_tokens_follow_the_same_rule(url):
    body = {"inputs": "attention", "parameters": {"top_n_tokens": 2, "lexicon": False, "details": True}}
    details = httpx.post(url + "/generate", json=body, timeout=30).json()["details"]
    for token, top in zip(details["tokens"], details["top_tokens"], strict=True):
        if token["id"] in {t["id"] for t in top}:
            assert chosen_alternative(token, top)["text"] == token["text"]


def test_the_readme_first_curl_answers_what_the_readme_says(url):
    import json
    import re
    import shlex

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(curl -s [^\n]+)\n# ([^\n]+)\n```", readme)
    assert block, "the README's first curl and its answer"
    argv = shlex.split(block.group(1))
    sent = json.loads(argv[argv.index("-d") + 1])
    r = httpx.post(url + "/generate", json=sent, timeout=30)
    assert r.text == block.group(2)
