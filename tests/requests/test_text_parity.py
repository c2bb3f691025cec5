"""HTTP and the in-process Generator answer alike: both go through the one request layer (service/requests/frontend.py).

The same requests are sent both ways to the default model (models/g2p-en: word-level, with all of
CMUdict as its lexicon): dictionary words, a stop sequence that cuts a lexicon answer, a length
cut, n-best answers that mix the lexicon's and the model's, `decoder_input_details` (which asks
the model), `lexicon: false`, and running text with a word the lexicon does not know.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from service_harness import load_engine, serving

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"

CASES = [
    ("hello", {}),
    ("attention", {"stop": ["EH1"]}),  # ends the lexicon's answer after its third phoneme
    ("attention", {"max_new_tokens": 2}),
    ("hello", {"best_of": 3}),  # two lexicon answers, then the model's first beam that differs from them
    ("zyxoplat", {"best_of": 2}),
    ("hello", {"decoder_input_details": True}),  # the model's own answer
    ("hello", {"lexicon": False}),
    ("Hello, world! I have 2 cats and a zyxoplat.", {}),
    ("Hello, world! I have 2 cats and a zyxoplat.", {"best_of": 2, "stop": ["L"]}),
]


@pytest.fixture(scope="module")
def both():
    from attnserve.service.client import Generator

    with serving(DEFAULT_BUNDLE) as server, Generator(DEFAULT_BUNDLE, engine=load_engine(DEFAULT_BUNDLE)) as g:
        yield server.url, g


def over_http(url: str, inputs: str, parameters: dict) -> tuple[str, list[list[tuple]]]:
    """generated_text, and each word's answers, best first: (text, source, score)."""
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    words = [
        [(w["text"], w["source"], w["score"])] + [(a["text"], a["source"], a["score"]) for a in w["alternatives"] or []]
        for w in body["details"]["words"]
    ]
    return body["generated_text"], words


def in_process(g, inputs: str, parameters: dict) -> tuple[str, list[list[tuple]]]:
    params = dict(parameters)
    lexicon = params.pop("lexicon", True)
    details = params.pop("decoder_input_details", False)
    # HTTP's details carry the model's scores: logprobs=True asks the in-process engine for them
    (result,) = g.generate_text_many([inputs], lexicon=lexicon, decoder_input_details=details, logprobs=True, **params)
    return result.text, [[(a.text, a.source, a.score) for a in answers] for answers in result.answers]


@pytest.mark.parametrize(("inputs", "parameters"), CASES, ids=[f"{i}-{sorted(p)}" for i, p in CASES])
def test_http_and_the_generator_give_the_same_answers(both, inputs, parameters):
    url, g = both
    http_text, http_words = over_http(url, inputs, parameters)
    text, words = in_process(g, inputs, parameters)
    assert text == http_text
    assert [[(t, s) for t, s, _ in w] for w in words] == [[(t, s) for t, s, _ in w] for w in http_words]
    for mine, theirs in zip(words, http_words):
        for (_, _, a), (_, _, b) in zip(mine, theirs):
            assert (a is None) == (b is None) and (a is None or a == pytest.approx(b, rel=1e-5, abs=1e-6))


def test_the_cases_cover_a_cut_lexicon_answer_and_mixed_n_best(both):
    """The cases above are not vacuous: a stop sequence and max_new_tokens cut a lexicon answer, and
    best_of mixes lexicon and model answers."""
    url, _ = both
    full, _ = over_http(url, "attention", {})
    stopped, words = over_http(url, "attention", {"stop": ["EH1"]})
    assert stopped != full and stopped.endswith("EH1") and words[0][0][1] == "lexicon"
    cut, _ = over_http(url, "attention", {"max_new_tokens": 2})
    assert len(cut.split()) < len(full.split())
    _, words = over_http(url, "hello", {"best_of": 3})
    assert [s for _, s, _ in words[0]] == ["lexicon", "lexicon", "model"]
    _, words = over_http(url, "hello", {"decoder_input_details": True})
    assert words[0][0][1] == "model"


def test_lines_in_flight_leave_the_batch_when_the_caller_stops_reading(both):
    """generate_text_many keeps a window of lines queued; closing it early cancels them, as a client that goes
    away cancels its request, instead of leaving their rows to decode for nobody."""
    import time

    _, g = both
    g.engine.step_delay_s = 0.05  # 128 lines of two model words each: seconds of decoding at this pace
    try:
        lines = g.generate_text_many(["zyxoplat quorbelind"] * 200, lexicon=False)
        assert next(lines).text
        assert g.scheduler.in_flight > 32
        lines.close()
        deadline = time.monotonic() + 1.0  # a few step boundaries
        while g.scheduler.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert g.scheduler.in_flight == 0
    finally:
        g.engine.step_delay_s = 0.0
