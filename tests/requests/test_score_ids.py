"""POST /score takes a target as the token ids a generation reported, so an answer scores exactly as it was
generated (a BPE model's "7" "8" where its tokenizer writes "78"); a bad id is a 422 naming the target."""

from pathlib import Path

import httpx
import pytest
from service_harness import serving

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


@pytest.fixture(scope="module")
def server():
    with serving(DEFAULT_BUNDLE) as s:
        yield s


def test_generated_ids_score_as_their_generation(server):
    body = {"inputs": "zyxoplat", "parameters": {"details": True, "lexicon": False}}
    gen = httpx.post(server.url + "/generate", json=body, timeout=60).json()
    tokens = gen["details"]["tokens"]
    ids = [t["id"] for t in tokens if not t["special"]]  # the end token is scored after the ids given
    r = httpx.post(server.url + "/score", json={"inputs": "zyxoplat", "targets": [ids, gen["generated_text"]]}, timeout=60)
    assert r.status_code == 200, r.text
    by_ids, by_text = r.json()["scores"]
    assert by_ids["target"] == gen["generated_text"]  # ids are reported as their text
    assert [t["id"] for t in by_ids["tokens"]] == [t["id"] for t in tokens]
    assert by_ids["total"] == pytest.approx(sum(t["logprob"] for t in tokens), abs=1e-5)
    assert by_ids["total"] == by_text["total"]  # this model's tokenizer splits its text as it generated it


@pytest.mark.parametrize(
    "target, message",
    [([], "target 0 is empty"), ([10**6], "not a token id of this model"), ([2], "special token id 2")],
)
def test_bad_ids_are_refused_naming_the_target(server, target, message):
    r = httpx.post(server.url + "/score", json={"inputs": "read", "targets": [target]}, timeout=60)
    assert r.status_code == 422 and message in r.json()["error"], r.text
