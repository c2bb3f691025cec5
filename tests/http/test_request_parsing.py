"""Every malformed body gets the documented 422 `validation`, and every parameter follows one rule: a value has its
JSON type (no strings as numbers, as TGI's router) and a number is finite."""

from __future__ import annotations

import httpx
import pytest
from service_harness import ROOT, metric, scrape, serving

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def url():
    with serving(ROOT / "models" / "g2p-en") as server:
        yield server.url


def post(url: str, body: bytes, route: str = "/generate", headers: dict | None = None) -> httpx.Response:
    return httpx.post(url + route, content=body, headers=JSON if headers is None else headers, timeout=30)


def assert_validation(r: httpx.Response, *needles: str) -> None:
    assert r.status_code == 422, r.text
    assert r.json()["error_type"] == "validation", r.text
    for needle in needles:
        assert needle in r.json()["error"], r.text


@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
def test_a_body_that_is_not_utf8_is_a_422_validation(url, route):
    r = post(url, b'{"inputs": "caf\xe9"}', route)
    assert_validation(r, "UTF-8")


@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
def test_json_nested_50000_deep_is_a_422_validation(url, route):
    r = post(url, b'{"inputs": "cat", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", route)
    assert_validation(r, "nested")


def test_a_malformed_body_without_a_content_type_is_a_422_validation(url):
    r = post(url, b'{"inputs": "caf\xe9"}', headers={})
    assert_validation(r)


def test_malformed_bodies_count_as_validation_in_the_metrics(url):
    before = metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="validation")
    post(url, b'{"inputs": "caf\xe9"}')
    post(url, b"[" * 5_000)
    assert metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="validation") - before == 2


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN"])
@pytest.mark.parametrize("name", ["temperature", "top_p", "repetition_penalty", "frequency_penalty", "typical_p"])
def test_non_finite_numbers_are_refused(url, name, value):
    r = post(url, b'{"inputs": "cat", "parameters": {"%s": %s}}' % (name.encode(), value.encode()))
    assert_validation(r, "finite")


@pytest.mark.parametrize(
    "body", [b'{"inputs": "caf\xe9"}', b'{"inputs": "cat", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"], ids=["utf8", "deep"]
)
def test_explain_answers_a_body_that_is_not_json_with_the_same_422(url, body):
    assert_validation(post(url, body, "/explain"), "not valid JSON")


@pytest.mark.parametrize("value", ["Infinity", "NaN"])
def test_non_finite_numbers_are_refused_on_explain_too(url, value):
    r = post(url, b'{"inputs": "cat", "parameters": {"temperature": %s, "seed": 1}}' % value.encode(), "/explain")
    assert_validation(r)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_new_tokens", '"5"'),
        ("max_new_tokens", "5.0"),
        ("temperature", '"0.5"'),
        ("top_k", '"3"'),
        ("top_p", '"0.9"'),
        ("seed", '"1"'),
        ("best_of", '"2"'),
        ("top_n_tokens", '"2"'),
        ("do_sample", '"true"'),
        ("do_sample", "1"),
        ("details", '"yes"'),
        ("stop", '"a"'),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_naming_the_parameter(url, name, value):
    r = post(url, b'{"inputs": "cat", "parameters": {"%s": %s}}' % (name.encode(), value.encode()))
    assert_validation(r, name)


def test_a_wrong_type_at_the_top_level_is_refused(url):
    assert_validation(post(url, b'{"inputs": 5}'), "inputs")
    assert_validation(post(url, b'{"inputs": "cat", "stream": "true"}', "/"), "stream")


def test_numbers_of_their_json_type_are_accepted(url):
    body = b'{"inputs": "cat", "parameters": {"max_new_tokens": 5, "temperature": 1, "top_p": 0.9, "seed": 3}}'
    r = post(url, body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("/v1/completions", b'{"model": "g2p-en", "prompt": "cat", "max_tokens": "5"}', "max_tokens"),
        ("/v1/completions", b'{"model": "g2p-en", "prompt": "cat", "temperature": "0.5"}', "temperature"),
        ("/v1/completions", b'{"model": "g2p-en", "prompt": "cat", "temperature": Infinity}', "temperature"),
        ("/v1/completions", b'{"model": "g2p-en", "prompt": "cat", "stream": "false"}', "stream"),
        ("/v1/chat/completions", b'{"model": "g2p-en", "messages": [{"role": "user", "content": "cat"}], "n": "1"}', "n"),
    ],
)
def test_the_openai_routes_follow_the_same_type_rule(url, route, body, param):
    r = post(url, body, route)
    assert r.status_code == 400, r.text  # OpenAI's status for what the TGI routes answer 422
    assert r.json()["error"]["param"] == param, r.text
