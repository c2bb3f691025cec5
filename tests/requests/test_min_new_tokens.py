"""min_new_tokens over HTTP (TGI's parameter; vLLM's `min_tokens` on /v1): the end token waits for it, and a value
past max_new_tokens is refused naming the field in each API's words."""

from pathlib import Path

import httpx
import pytest
from service_harness import serving

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


@pytest.fixture(scope="module")
def server():
    with serving(DEFAULT_BUNDLE) as s:
        yield s


def test_tgi_min_new_tokens_holds_the_end_token_back(server):
    def tokens(**extra) -> int:
        body = {"inputs": "cat", "parameters": {"details": True, "lexicon": False, **extra}}
        r = httpx.post(server.url + "/generate", json=body, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["details"]["generated_tokens"]

    plain = tokens()
    assert tokens(min_new_tokens=plain + 4, max_new_tokens=20) >= plain + 4


def test_openai_min_tokens_holds_the_end_token_back(server):
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    body = {"model": model, "prompt": "cat", "temperature": 0, "lexicon": False}
    plain = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["usage"]["completion_tokens"]
    r = httpx.post(server.url + "/v1/completions", json={**body, "min_tokens": plain + 4, "max_tokens": 20}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= plain + 4


def test_past_max_new_tokens_is_refused_naming_the_field(server):
    body = {"inputs": "cat", "parameters": {"min_new_tokens": 9, "max_new_tokens": 5}}
    r = httpx.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 422 and r.json()["error"].startswith("parameters: min_new_tokens"), r.text
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    body = {"model": model, "prompt": "cat", "min_tokens": 9, "max_tokens": 5}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens", r.text
