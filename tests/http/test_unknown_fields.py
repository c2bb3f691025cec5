"""Unknown request fields over HTTP on 127.0.0.1 (default model): a misspelt parameter is refused with "did you mean",
any other unknown field is ignored, named in `x-attnserve-ignored-fields` and logged once per name."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from service_harness import serving

from attnserve.service.requests.validation import close_match

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
HEADER = "x-attnserve-ignored-fields"


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE) as s:
        yield s.url


@pytest.fixture(scope="module")
def model(url) -> str:
    return httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("alphabett", "alphabet"),
        ("max_new_token", "max_new_tokens"),
        ("pronunciation", "pronunciations"),
        ("Temperature", "temperature"),
        ("max-new-tokens", "max_new_tokens"),
        ("maxNewTokens", "max_new_tokens"),
        ("stres", "stress"),
    ],
)
@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
def test_a_misspelt_parameter_is_a_422_saying_what_was_meant(url, route, name, meant):
    r = httpx.post(url + route, json={"inputs": "hello", "parameters": {name: 1}}, timeout=30)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_type"] == "validation"
    assert f"`parameters.{name}`" in body["error"] and f"did you mean `parameters.{meant}`?" in body["error"]


def test_a_misspelt_top_level_field_is_a_422_too(url):
    r = httpx.post(url + "/generate", json={"inputs": "hello", "parameter": {"details": True}}, timeout=30)
    assert r.status_code == 422 and "did you mean `parameters`?" in r.json()["error"]


@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
def test_other_unknown_fields_are_ignored_and_named_in_a_header(url, route):
    body = {"inputs": "hello", "vendor_tag": "x", "parameters": {"ipa": True, "ignore_eos": False, "top_a": 2}}
    r = httpx.post(url + route, json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers[HEADER] == "parameters.ignore_eos,parameters.ipa,parameters.top_a,vendor_tag"
    plain = httpx.post(url + route, json={"inputs": "hello"}, timeout=30)
    assert plain.status_code == 200 and HEADER not in plain.headers
    assert r.text.replace("\n", "")[-40:] == plain.text.replace("\n", "")[-40:]  # the same answer


@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
@pytest.mark.parametrize(("name", "value"), [("max_new_tokens", 5), ("temperature", 0.7), ("details", True), ("maxNewTokens", 5)])
def test_a_generation_parameter_at_the_top_level_is_a_422_saying_to_move_it_into_parameters(url, route, name, value):
    r = httpx.post(url + route, json={"inputs": "hello", name: value}, timeout=30)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_type"] == "validation"
    assert f"`{name}`" in body["error"] and "move it into `parameters`" in body["error"], body
    inside = httpx.post(url + route, json={"inputs": "hello", "parameters": {"max_new_tokens": 5}}, timeout=30)
    assert inside.status_code == 200, inside.text


def test_the_explain_route_checks_names_too(url):
    r = httpx.post(url + "/explain", json={"inputs": "hello", "parameters": {"alphabett": "ipa"}}, timeout=30)
    assert r.status_code == 422 and "did you mean `parameters.alphabet`?" in r.json()["error"]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    ("name", "meant"), [("alphabett", "alphabet"), ("max_token", "max_tokens"), ("pronunciation", "pronunciations")]
)
def test_openai_routes_answer_a_misspelt_field_with_openais_400_naming_it(url, model, route, name, meant):
    body = {"model": model, name: 1}
    body |= {"prompt": "hello"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "hello"}]}
    r = httpx.post(url + route, json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == name and f"did you mean `{meant}`?" in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
def test_openai_routes_name_other_unknown_fields_in_the_header(url, model, stream):
    body = {"model": model, "prompt": "hello", "store": False, "ignore_eos": False, "min_p": 0.1, "stream": stream}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        r.read()
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == "ignore_eos,min_p,store"


def test_each_ignored_name_is_logged_once(url, caplog):
    with caplog.at_level(logging.INFO, logger="attnserve.service"):
        for _ in range(3):
            httpx.post(url + "/generate", json={"inputs": "hello", "parameters": {"once_only_field": 1}}, timeout=30)
    lines = [rec.getMessage() for rec in caplog.records if "once_only_field" in rec.getMessage()]
    assert len(lines) == 1 and HEADER in lines[0]


def test_a_name_that_cannot_go_in_a_header_is_percent_encoded(url):
    r = httpx.post(url + "/generate", json={"inputs": "hello", "parameters": {"naïve, field": 1}}, timeout=30)
    assert r.status_code == 200 and r.headers[HEADER] == "parameters.na%C3%AFve%2C%20field"


def test_vendor_fields_close_to_ours_are_not_called_misspellings():
    known = ["max_new_tokens", "max_tokens", "top_p", "stop", "temperature", "alphabet", "stress", "pronunciations"]
    for vendor in ("min_new_tokens", "min_tokens", "min_p", "stop_token_ids", "store", "metadata", "ignore_eos", "ipa"):
        assert close_match(vendor, known) is None, vendor
