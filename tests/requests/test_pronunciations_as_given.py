"""A request's pronunciation written in espeak-ng's IPA, for an answer in it, is answered as written (stress and
length marks included), whole and streamed; in ARPAbet or IPA, or without stress, the answer's form writes it."""

import json
from pathlib import Path

import httpx
import pytest
from service_harness import serving

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"
GIVEN = {"Kubernetes": "kˌuːbɚnˈɛɾiːz", "New York": "nuː jˈɔːɹk"}
TEXT = "Kubernetes in New York"


@pytest.fixture(scope="module")
def server():
    with serving(DEFAULT_BUNDLE) as s:
        yield s


def answer(server, **parameters) -> dict:
    body = {"inputs": TEXT, "parameters": {"pronunciations": GIVEN, "details": "words", **parameters}}
    r = httpx.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("alphabet", ["espeak"])
def test_written_in_the_answers_form_it_comes_back_as_written(server, alphabet):
    got = answer(server, alphabet=alphabet)
    words = {w["word"]: w["text"] for w in got["details"]["words"]}
    assert words["kubernetes"] == GIVEN["Kubernetes"] and words["New York"] == GIVEN["New York"], got
    body = {"inputs": TEXT, "parameters": {"pronunciations": GIVEN, "alphabet": alphabet}}
    with httpx.stream("POST", server.url + "/generate_stream", json=body, timeout=60) as r:
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    streamed = "".join(e["token"]["text"] for e in events)
    assert streamed == events[-1]["generated_text"] == got["generated_text"]


def test_in_arpabet_ipa_or_without_stress_the_form_writes_it(server):
    words = {w["word"]: w["text"] for w in answer(server)["details"]["words"]}
    assert words["kubernetes"] == "K UW2 B ER0 N EH1 T IY0 Z"
    words = {w["word"]: w["text"] for w in answer(server, alphabet="ipa")["details"]["words"]}
    assert words["kubernetes"] == "ˌkubɚˈnɛtiz"  # IPA written from the phones, as this server writes IPA
    words = {w["word"]: w["text"] for w in answer(server, alphabet="espeak", stress=False)["details"]["words"]}
    assert "ˈ" not in words["kubernetes"] and words["kubernetes"] != GIVEN["Kubernetes"]
