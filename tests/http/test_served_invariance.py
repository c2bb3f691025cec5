"""The variant the default model serves, through the whole server: a word's answer is the same alone and among
64 concurrent clients, greedy, with a seed and by beam search, whole or streamed (/generate_stream and /v1 chat
streams are written from the engine's wake-ups: service/http/generation.py), while long texts are read in chunks and
/score steps its own batch beside the generation batch (the scheduler's grouped queue, text chunks and scoring turns
all move rows in and out of the batch between steps)."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_harness import metric, scrape, serving, stream

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"
SERVED = json.loads((DEFAULT_BUNDLE / "bundle.json").read_text())["default_variant"]["cpu"]

rng = random.Random(7)
# made-up words, so every answer comes from the model's decode loop and not from the lexicon
SYLLABLES = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
WORDS = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(40)})
# and one longer than the model reads (48 positions): its parts are rows of the same batch (service/requests/parts.py)
LONG_WORD = "".join(rng.choice(SYLLABLES) for _ in range(31))
WHOLE_WORDS = list(WORDS)  # each read by the model in one row
WORDS.insert(3, LONG_WORD)
SEEDED = {"do_sample": True, "temperature": 0.9, "top_p": 0.95}
BEAM = {"num_beams": 4}  # beams move caches between rows inside the shared batch (place_beams, reorder)


@pytest.fixture(scope="module")
def url():
    # a small bound, so that the long texts below are read in chunks while the words run
    with serving(DEFAULT_BUNDLE, max_concurrent_requests=64, max_batch_size=32) as s:
        yield s.url


def post(url: str, route: str, body: dict) -> httpx.Response:
    """As a client does: a 429 (the bound is full) is retried after a moment."""
    while True:
        r = httpx.post(url + route, json=body, timeout=120)
        if r.status_code != 429:
            assert r.status_code == 200, r.text
            return r
        time.sleep(0.05)


def answer(url: str, text: str, **parameters) -> str:
    return post(url, "/generate", {"inputs": text, "parameters": {"lexicon": False, **parameters}}).json()["generated_text"]


def streamed(url: str, text: str, **parameters) -> str:
    """A /generate_stream answer: its tokens' texts joined, checked against its last event's generated_text."""
    while (done := stream(url + "/generate_stream", {"inputs": text, "parameters": {"lexicon": False, **parameters}}))[0] == 429:
        time.sleep(0.05)
    status, events = done
    assert status == 200, events
    text = "".join(e["token"]["text"] for e in events)
    assert text == events[-1]["generated_text"]
    return text


def chat(url: str, word: str, stream: bool, **parameters) -> str:
    """A /v1/chat/completions answer's content, whole or streamed (its deltas joined, up to `data: [DONE]`)."""
    body = {"model": "g2p-en", "messages": [{"role": "user", "content": word}], "lexicon": False, "stream": stream}
    if not stream:
        return post(url, "/v1/chat/completions", {**body, **parameters}).json()["choices"][0]["message"]["content"]
    while True:
        with httpx.stream("POST", url + "/v1/chat/completions", json={**body, **parameters}, timeout=120) as r:
            if r.status_code == 429:
                time.sleep(0.05)
                continue
            assert r.status_code == 200, r.read()
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)


CHAT_SEEDED = {"temperature": 0.9, "top_p": 0.95}


def chat_jobs() -> list[tuple[str, dict]]:
    """A few words greedy and with their own seed, on /v1."""
    return [(w, {}) for w in WORDS[:10]] + [(w, {**CHAT_SEEDED, "seed": i}) for i, w in enumerate(WORDS[:10])]


def jobs() -> list[tuple[str, dict]]:
    """Each word greedy, with its own seed, and by beam search."""
    return [(w, {}) for w in WORDS] + [(w, {**SEEDED, "seed": i}) for i, w in enumerate(WORDS)] + [(w, BEAM) for w in WORDS]


def test_the_server_serves_the_default_variant(url):
    assert httpx.get(url + "/info").json()["variant"] == SERVED


def test_answers_are_the_same_alone_and_among_64_concurrent_clients(url):
    alone = {(w, json.dumps(p)): answer(url, w, **p) for w, p in jobs()}
    sampled = [alone[(w, json.dumps({**SEEDED, "seed": i}))] for i, w in enumerate(WORDS)]
    assert sampled != [alone[(w, "{}")] for w in WORDS]  # the seeded requests really sample
    streamed_alone = [streamed(url, w, **p) for w, p in jobs()[: 2 * len(WORDS)]]  # greedy and seeded
    assert streamed_alone == [alone[(w, json.dumps(p))] for w, p in jobs()[: 2 * len(WORDS)]]
    chat_alone = {(w, json.dumps(p)): chat(url, w, False, **p) for w, p in chat_jobs()}
    assert all(chat(url, w, True, **p) == chat_alone[(w, json.dumps(p))] for w, p in chat_jobs())
    long_text = " ".join(WORDS)  # more model-bound words than one chunk of the bound: read in chunks

    def client(k: int):
        if k % 16 == 0:  # a long text among the words
            return "text", answer(url, long_text)
        if k % 16 == 1:  # a scoring request among them: its batch steps beside the generation batch
            w = WORDS[k % len(WORDS)]
            post(url, "/score", {"inputs": w, "targets": [alone[(w, "{}")]]})
            return "score", None
        if k % 16 in (2, 3, 4, 5):  # streamed, greedy or seeded, among the whole answers
            w, p = jobs()[k % (2 * len(WORDS))]
            return (w, json.dumps(p)), streamed(url, w, **p)
        if k % 16 in (6, 7):
            w, p = chat_jobs()[k % len(chat_jobs())]
            return ("chat", w, json.dumps(p)), chat(url, w, True, **p)
        w, p = jobs()[k % len(jobs())]
        return (w, json.dumps(p)), answer(url, w, **p)

    with ThreadPoolExecutor(64) as pool:
        together = list(pool.map(client, range(400)))
    words = [(key, got) for key, got in together if key not in ("text", "score") and key[0] != "chat"]
    assert len(words) > 200
    assert [got for _, got in words] == [alone[key] for key, _ in words]
    chats = [(key[1:], got) for key, got in together if key[0] == "chat"]
    assert len(chats) >= 40 and [got for _, got in chats] == [chat_alone[key] for key, _ in chats]
    texts = [got for key, got in together if key == "text"]
    greedy = " | ".join(alone[(w, "{}")] for w in WORDS)
    assert texts and all(t == greedy for t in texts)  # a text's words read in chunks answer as each word alone


def reported(url: str, text: str, **parameters) -> list:
    """A whole answer's hypotheses with every token's id and log-probability as /generate reports them (details)."""
    body = {"inputs": text, "parameters": {"lexicon": False, "details": True, **parameters}}
    d = post(url, "/generate", body).json()["details"]
    return [[(t["id"], t["logprob"]) for t in seq["tokens"]] for seq in [d, *(d.get("best_of_sequences") or [])]]


def streamed_reported(url: str, text: str, **parameters) -> list:
    """A /generate_stream answer's tokens as (id, log-probability), as its events carry them."""
    while (done := stream(url + "/generate_stream", {"inputs": text, "parameters": {"lexicon": False, **parameters}}))[0] == 429:
        time.sleep(0.05)
    status, events = done
    assert status == 200, events
    return [(e["token"]["id"], e["token"]["logprob"]) for e in events]


def test_reported_log_probabilities_are_the_same_alone_and_among_64_concurrent_clients(url):
    """Not only the tokens: every log-probability a client is told (details, stream events, a beam's n-best) is the
    same float alone, where a step holds one row (or one beam search's four), and among 64 clients, where it holds
    up to 32: the step reads a few rows' log-probabilities one by one and many rows' in one gather, and a lone beam
    search takes its own step (service/engine/step.py, beam.py)."""
    cases = [(w, {}) for w in WORDS[:16]] + [(w, {**SEEDED, "seed": i}) for i, w in enumerate(WORDS[:16])]
    cases += [(w, BEAM) for w in WORDS[:8]]
    alone = [reported(url, w, **p) for w, p in cases]
    assert all(lp is not None for hyps in alone for hyp in hyps for _, lp in hyp)
    streamed_alone = [streamed_reported(url, w, **p) for w, p in cases[:32]]  # greedy and seeded
    assert streamed_alone == [hyps[0] for hyps in alone[:32]]  # a stream tells what the whole answer's details tell

    def client(k: int):
        w, p = cases[k % len(cases)]
        if k % 4 == 3 and k % len(cases) < 32:
            return "stream", k % len(cases), streamed_reported(url, w, **p)
        return "whole", k % len(cases), reported(url, w, **p)

    with ThreadPoolExecutor(64) as pool:
        together = list(pool.map(client, range(240)))
    for kind, i, got in together:
        assert got == (alone[i] if kind == "whole" else streamed_alone[i]), cases[i]


def test_the_token_metrics_count_every_token_of_concurrent_greedy_and_seeded_answers(url):
    """The decode loop's step metrics, kept per step and observed together (service/metrics.py StepObservations), on
    the served variant under 64 concurrent clients: the generated-tokens counter, the per-request histogram and the
    batch-size histogram's sum (a token per row and step) each grow by exactly the tokens the answers report, over
    steps that held many rows."""
    before = scrape(url)
    # words read whole: a word read in parts generates an end token per part, which the counters count and its
    # answer, one word, does not
    cases = [(w, {}) for w in WHOLE_WORDS] + [(w, {**SEEDED, "seed": i}) for i, w in enumerate(WHOLE_WORDS)]

    def tokens(k: int) -> int:
        w, p = cases[k % len(cases)]
        body = {"inputs": w, "parameters": {"lexicon": False, "details": True, **p}}
        return post(url, "/generate", body).json()["details"]["generated_tokens"]

    with ThreadPoolExecutor(64) as pool:
        n = sum(pool.map(tokens, range(256)))
    after = scrape(url)

    def grew(name: str) -> float:
        return metric(after, name) - metric(before, name)

    assert grew("attnserve_generated_tokens_total") == n
    assert grew("attnserve_request_generated_tokens_sum") == n
    assert grew("attnserve_batch_size_sum") == n
    assert n / grew("attnserve_batch_size_count") > 4  # steps held many rows: the concurrent path was taken
