"""Each numeric parameter's range is the engine's (service/engine/options.py `BOUNDS`), or on the OpenAI routes the
OpenAI layer's narrower one (service/http/openai/ranges.py): every parameter sent at and just past each end of its
range, to every generation route, is accepted or refused alike, and a refusal names that parameter (TGI's 422 in its
message, OpenAI's 400 as `param`).

A real uvicorn server on 127.0.0.1 serves the default bundle."""

from __future__ import annotations

import re

import httpx
import pytest
from service_harness import ROOT, serving

from attnserve.service.engine.options import BOUNDS, Bound
from attnserve.service.http.openai.ranges import NARROWER

TGI = ["/generate", "/generate_stream", "/"]
EPS = 1e-6
# its bounds are the engine's on every route, and /v1 names it min_tokens: tests/requests/test_min_new_tokens.py
NOT_PARAMETERS = {"min_new_tokens"}
# the OpenAI field with each engine option's range, per route (typical_p is not one of OpenAI's)
OPENAI_FIELDS = {
    "/v1/completions": {
        "max_new_tokens": "max_tokens",
        "temperature": "temperature",
        "top_k": "top_k",
        "top_p": "top_p",
        "repetition_penalty": "repetition_penalty",
        "frequency_penalty": "frequency_penalty",
        "presence_penalty": "presence_penalty",
        "seed": "seed",
        "best_of": "best_of",
        "num_beams": "num_beams",
        "top_n_tokens": "logprobs",
    },
    "/v1/chat/completions": {
        "max_new_tokens": "max_completion_tokens",
        "temperature": "temperature",
        "top_k": "top_k",
        "top_p": "top_p",
        "repetition_penalty": "repetition_penalty",
        "frequency_penalty": "frequency_penalty",
        "presence_penalty": "presence_penalty",
        "seed": "seed",
        "best_of": "n",
        "num_beams": "num_beams",
        "top_n_tokens": "top_logprobs",
    },
}


@pytest.fixture(scope="module")
def server():
    with serving(ROOT / "models" / "g2p-en") as s:
        yield s


def edges(bound: Bound) -> list[tuple[float, bool]]:
    """(value, accepted) at and just past each end of `bound`."""
    step = 1 if bound.integer else EPS
    out = []
    if bound.low is not None:
        out += [(bound.low, not bound.low_open), (bound.low - step, False)]
    if bound.high is not None:
        out += [(bound.high, not bound.high_open), (bound.high + step, False)]
    return out


def tgi_cases() -> list[tuple[str, float, bool]]:
    return [(o, v, ok) for o, b in BOUNDS.items() if o not in NOT_PARAMETERS for v, ok in edges(b)]


def openai_cases(route: str) -> list[tuple[str, float, bool]]:
    cases = []
    for option, field in OPENAI_FIELDS[route].items():
        narrower = NARROWER.get(field)
        cases += [(field, v, ok) for v, ok in edges(narrower.bound if narrower is not None else BOUNDS[option])]
    return cases


@pytest.mark.parametrize("route", TGI)
def test_every_tgi_parameter_at_and_past_its_bounds_is_named_when_refused(server, route):
    wrong = []
    for option, value, accepted in tgi_cases():
        if route == "/generate_stream" and option == "num_beams" and accepted:
            continue  # beam search cannot be streamed: refused for that reason, whatever its width
        parameters = {"max_new_tokens": 2} | {option: value}
        r = httpx.post(server.url + route, json={"inputs": "cat", "parameters": parameters}, timeout=60)
        if accepted:
            ok = r.status_code == 200
        else:
            ok = r.status_code == 422 and re.search(rf"parameters(\.|: ){option}\b", r.json()["error"]) is not None
        if not ok:
            wrong.append((option, value, accepted, r.status_code, r.text[:200]))
    assert not wrong, wrong


@pytest.mark.parametrize("route", list(OPENAI_FIELDS))
def test_every_openai_parameter_at_and_past_its_bounds_is_named_when_refused(server, route):
    model = httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    text = {"prompt": "cat"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "cat"}]}
    wrong = []
    for field, value, accepted in openai_cases(route):
        body = {"model": model, **text, "max_tokens": 2} | {field: value}
        if field == "max_completion_tokens":
            del body["max_tokens"]
        if field == "top_logprobs":
            body["logprobs"] = True
        r = httpx.post(server.url + route, json=body, timeout=60)
        if accepted:
            ok = r.status_code == 200
        else:
            ok = r.status_code == 400 and r.json()["error"]["param"] == field
        if not ok:
            wrong.append((field, value, accepted, r.status_code, r.text[:200]))
    assert not wrong, wrong


def test_every_parameter_is_tested_on_every_route():
    """A bound added to the engine's table is sent to every route (or said here to be no route's)."""
    options = set(BOUNDS) - NOT_PARAMETERS
    assert {o for o, _, _ in tgi_cases()} == options
    for fields in OPENAI_FIELDS.values():
        assert set(fields) == options - {"typical_p"}
    assert set(NARROWER) <= {f for fields in OPENAI_FIELDS.values() for f in fields.values()}
