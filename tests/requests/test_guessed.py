"""A model answer scored below the bundle's guess threshold says `guessed: true` in the words' details; a
dictionary word's answer never does, and a bundle without a threshold flags nothing."""

import json
import shutil
from pathlib import Path

import httpx
from service_harness import serving

from attnserve.service.engine.bundle import load_bundle, write_bundle_json

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"

# made-up spellings the model has to guess at, and words the lexicon holds
STRANGE = ["xqzvbrt", "ngkwoth", "pfzhuyle"]
KNOWN = ["attention", "house"]


def words(server, text: str) -> list[dict]:
    body = {"inputs": text, "parameters": {"details": True}}
    r = httpx.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["details"]["words"]


def test_guesses_below_the_threshold_are_flagged_and_lexicon_answers_never():
    threshold = load_bundle(DEFAULT_BUNDLE).guess_threshold
    assert threshold is not None  # the default model ships one (attnserve-export add-confidence)
    with serving(DEFAULT_BUNDLE) as s:
        got = words(s, " ".join(STRANGE + KNOWN))
    by_word = {w["word"]: w for w in got}
    for word in STRANGE:
        w = by_word[word]
        assert w["source"] == "model" and w["guessed"] == (w["score"] < threshold), w
    assert any(by_word[word]["guessed"] for word in STRANGE), got
    for word in KNOWN:
        assert by_word[word]["source"] == "lexicon" and by_word[word]["guessed"] is False


def test_a_bundle_without_a_threshold_flags_nothing(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(DEFAULT_BUNDLE, bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    del meta["confidence"]
    write_bundle_json(bundle, meta)
    with serving(bundle) as s:
        got = words(s, " ".join(STRANGE))
    assert [w["guessed"] for w in got] == [False] * len(STRANGE) and all(w["source"] == "model" for w in got)
