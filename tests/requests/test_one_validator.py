"""One validator (service/requests/validation.py): the same bad request names the same field through every front end.

Over a real uvicorn server on 127.0.0.1 (the default model) and the in-process `Generator` on the same bundle: TGI's
routes answer a 422 whose message names the field (as a path in TGI's body), OpenAI's a 400 whose `param` is the
field OpenAI's body sent (mapped from that path by a table, never read from the message), and the `Generator` raises
an `InputError` whose `.field` is the TGI path.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from service_harness import serving

from attnserve.service.client import Generator, UnknownOption
from attnserve.service.engine.engine import InputError
from attnserve.service.errors import InvalidRequest
from attnserve.service.http.openai.errors import PARAMS, from_error, param_table

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
MAX_NEW_TOKENS = 8
LONG_TEXT = "word " * 4001  # longer than a request's text may be (max_text_chars); a long word is read in parts


@pytest.fixture(scope="module")
def server():
    with serving(DEFAULT_BUNDLE, max_new_tokens=MAX_NEW_TOKENS) as s:
        s.model = httpx.get(s.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        yield s


@pytest.fixture(scope="module")
def generator():
    with Generator(DEFAULT_BUNDLE, threads=1) as g:
        yield g


def tgi(server, inputs: str, **parameters) -> dict:
    r = httpx.post(server.url + "/generate", json={"inputs": inputs, "parameters": parameters}, timeout=60)
    assert r.status_code == 422, r.text
    assert r.json()["error_type"] == "validation"
    return r.json()


def openai(server, prompt: str, **fields) -> dict:
    body = {"model": server.model, "prompt": prompt, **fields}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_max_new_tokens_over_the_servers_limit_names_it_on_both_routes(server):
    assert tgi(server, "hello", max_new_tokens=MAX_NEW_TOKENS + 1)["error"] == (
        f"parameters.max_new_tokens must be between 1 and {MAX_NEW_TOKENS}, got {MAX_NEW_TOKENS + 1}"
    )
    error = openai(server, "hello", max_tokens=MAX_NEW_TOKENS + 1)
    assert error["param"] == "max_tokens" == PARAMS["max_new_tokens"]
    assert error["message"] == f"max_tokens must be at most {MAX_NEW_TOKENS} on this server, got {MAX_NEW_TOKENS + 1}"


def test_max_new_tokens_of_zero_names_the_field_everywhere(server, generator):
    assert tgi(server, "hello", max_new_tokens=0)["error"].startswith("parameters.max_new_tokens:")
    assert openai(server, "hello", max_tokens=0)["param"] == "max_tokens"
    with pytest.raises(InputError) as caught:
        generator.generate_text_many(["hello"], max_new_tokens=0).__next__()
    assert caught.value.field == "parameters.max_new_tokens"
    assert str(caught.value) == "max_new_tokens must be a positive integer, got 0"


def test_a_bad_temperature_names_temperature_everywhere(server, generator):
    assert tgi(server, "hello", temperature=-1.0)["error"] == "parameters: temperature must be > 0, got -1.0"
    assert openai(server, "hello", temperature=-1.0)["param"] == "temperature"
    with pytest.raises(InputError) as caught:
        generator.generate("hello", temperature=-1.0)
    assert caught.value.field == "parameters.temperature" and str(caught.value) == "temperature must be > 0, got -1.0"


def test_a_misspelt_field_is_refused_with_what_was_meant_everywhere(server, generator):
    assert tgi(server, "hello", temprature=0.5)["error"] == (
        "unknown field `parameters.temprature`: did you mean `parameters.temperature`?"
    )
    error = openai(server, "hello", temprature=0.5)
    assert error["param"] == "temprature" and error["message"] == "unknown field `temprature`: did you mean `temperature`?"
    with pytest.raises(UnknownOption) as caught:
        generator.generate("hello", temprature=0.5)
    assert isinstance(caught.value, TypeError)  # as Python calls an unexpected keyword argument
    assert caught.value.field == "parameters.temprature" and "did you mean `temperature`?" in str(caught.value)


def test_too_long_a_text_names_the_input_everywhere(server, generator):
    message = tgi(server, LONG_TEXT)["error"]
    assert message.startswith("inputs: ") and "characters long" in message
    error = openai(server, LONG_TEXT)
    assert error["param"] == "prompt" and error["message"] == message
    chat = httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": server.model, "messages": [{"role": "user", "content": LONG_TEXT}]},
        timeout=60,
    ).json()["error"]
    assert chat["param"] == "messages" and chat["message"] == message
    (answer,) = generator.generate_text_many([LONG_TEXT])
    assert isinstance(answer, InputError) and answer.field == "inputs" and f"inputs: {answer}" == message


def test_too_many_best_of_names_best_of_on_both_routes(server):
    assert tgi(server, "hello", best_of=99)["error"] == "parameters.best_of must be at most 4 on this server, got 99"
    error = openai(server, "hello", best_of=99, n=1)
    assert error["param"] == "best_of" and error["message"] == "best_of must be at most 4 on this server, got 99"


def test_openai_param_comes_from_the_errors_field_not_its_message():
    """A refusal whose message names no field still gets its param, and one whose message looks like a field path
    but whose field is another gets the field's: the table is read, the text never."""
    err = from_error(InvalidRequest("no field in these words", "stress"), param_table("messages"))
    assert err.param == "stress" and err.status == 400
    err = from_error(InvalidRequest("inputs: looks like the input", "parameters"), param_table("messages"))
    assert err.param is None
    assert from_error(InvalidRequest("x", "inputs"), param_table("messages")).param == "messages"
    renamed = param_table("messages", "max_completion_tokens")
    assert from_error(InvalidRequest("x", "max_new_tokens"), renamed).param == "max_completion_tokens"
