"""The internal request and its names: every option each front end sets is in that front end's one table of wire names,
refusals are said in each API's own words (a field named once, no schema internals), and every reading default is
resolved in one place (service/text/options.py `ReadingOptions`)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from pydantic import ValidationError

from attnserve.service.client import FIELDS
from attnserve.service.errors import InvalidRequest
from attnserve.service.http.errors import TGI_NAMES, describe_validation_errors, tgi_message
from attnserve.service.http.openai import completions
from attnserve.service.http.openai.errors import CHAT_MAX_TOKENS_PARAMS, CHAT_PARAMS, PARAMS, from_error
from attnserve.service.http.openai.schemas import ChatCompletionRequest, CompletionRequest
from attnserve.service.http.schemas import GenerateParameters, GenerateRequest
from attnserve.service.requests.request import OPTION_NAMES, OptionRefused, OutputOptions
from attnserve.service.requests.validation import Limits, decoding_options
from attnserve.service.text.options import DEFAULT_READING, READING_OPTIONS, ReadingOptions

ROOT = Path(__file__).resolve().parents[2]
# what no OpenAI body can set: TGI's own parameters (typical_p, truncate, the prefill, the input in front)
NOT_OPENAI = {"typical_p", "truncate", "decoder_input_details", "return_full_text"}
OPENAI_TABLES = {"/v1/completions": (PARAMS, CompletionRequest), "/v1/chat/completions": (CHAT_PARAMS, ChatCompletionRequest)}


def test_every_option_is_in_the_tgi_table_as_a_field_of_its_body():
    assert set(OPTION_NAMES) <= set(TGI_NAMES)
    wire = set(GenerateParameters.model_fields) | set(GenerateRequest.model_fields)
    for name in OPTION_NAMES:
        path = TGI_NAMES[name]
        assert path.removeprefix("parameters.") in wire, (name, path)


def test_every_option_the_openai_routes_set_is_in_each_routes_table_as_a_field_of_its_body():
    body = CompletionRequest(model="m", prompt="x")
    decoding = set(completions.decoding_values(body, True, 4, 0, 1, 2)) - {"logprobs", "token_text"}
    assert decoding <= set(OPTION_NAMES)
    options = set(OPTION_NAMES) - NOT_OPENAI
    assert decoding <= options
    for table, schema in [*OPENAI_TABLES.values(), (CHAT_MAX_TOKENS_PARAMS, ChatCompletionRequest)]:
        assert options <= set(table), options - set(table)
        for name in options:
            assert table[name] in schema.model_fields, (name, table[name])
    assert CHAT_PARAMS["max_new_tokens"] == "max_completion_tokens" and CHAT_MAX_TOKENS_PARAMS["max_new_tokens"] == "max_tokens"


def test_every_option_is_in_the_generators_table():
    assert set(OPTION_NAMES) <= set(FIELDS)
    assert all(FIELDS[name] == TGI_NAMES[name] for name in OPTION_NAMES)  # its keywords are TGI's parameters


def test_the_internal_names_are_the_options_fields():
    assert set(READING_OPTIONS) == {f.name for f in fields(ReadingOptions)}
    assert {f.name for f in fields(OutputOptions)} <= set(OPTION_NAMES)


@pytest.mark.parametrize("name", OPTION_NAMES)
def test_a_refusal_of_any_option_names_it_in_each_apis_words_with_a_param(name):
    refused = InvalidRequest("must be fixed", name)
    assert tgi_message(refused) == f"{TGI_NAMES[name]}: must be fixed"
    for route, (table, _) in OPENAI_TABLES.items():
        if name in NOT_OPENAI:
            continue
        err = from_error(refused, table)
        assert err.param == table[name] and err.param is not None, (route, name)


def test_an_engine_refusal_names_its_option_once_in_each_apis_words():
    with pytest.raises(OptionRefused) as caught:
        decoding_options({"max_new_tokens": 4, "temperature": -1.0}, Limits())
    assert tgi_message(caught.value) == "parameters: temperature must be > 0, got -1.0"
    assert from_error(caught.value, PARAMS).message == "temperature must be > 0, got -1.0"
    with pytest.raises(OptionRefused) as caught:
        decoding_options({"max_new_tokens": 0}, Limits())
    err = from_error(caught.value, CHAT_PARAMS)
    assert err.param == "max_completion_tokens" and err.message == "max_completion_tokens must be a positive integer, got 0"


def test_max_new_tokens_of_zero_names_its_field_once_on_the_tgi_routes():
    with pytest.raises(InvalidRequest) as caught:
        Limits(max_new_tokens=8).new_tokens(0)
    message = tgi_message(caught.value)
    assert message.startswith("parameters.max_new_tokens:") and message.count("max_new_tokens") == 1, message


def test_a_value_of_none_of_a_fields_types_shows_no_schema_internals():
    def refusal(model, body) -> str:
        with pytest.raises(ValidationError) as caught:
            model.model_validate(body)
        return describe_validation_errors(caught.value.errors())

    prompt = refusal(CompletionRequest, {"model": "m", "prompt": 42})
    assert prompt == "prompt: must be a string or a list", prompt
    parameters = refusal(GenerateRequest, {"inputs": "cat", "parameters": []})
    assert parameters == "parameters: must be a JSON object", parameters
    details = refusal(GenerateRequest, {"inputs": "cat", "parameters": {"details": 5}})
    assert details == "parameters.details: must be a boolean or 'words' or 'sentences'", details


def test_each_reading_default_is_resolved_in_one_place():
    assert ReadingOptions.of() == DEFAULT_READING == ReadingOptions()
    assert ReadingOptions.of("arpabet", lexicon=None, date_order=None) == DEFAULT_READING  # unset: the default
    assert ReadingOptions.of("espeak").punctuation and not ReadingOptions.of("espeak", punctuation=False).punctuation
    assert not ReadingOptions.of("ipa").punctuation
    with pytest.raises(InvalidRequest) as caught:
        ReadingOptions(date_order="mmddyy")
    assert caught.value.field == "date_order"
    assert tgi_message(caught.value).startswith("parameters.date_order: must be one of")
    assert from_error(caught.value, PARAMS).param == "date_order"


def test_an_empty_and_a_blank_input_get_the_same_refusal():
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import Engine
    from attnserve.service.engine.scheduler import Scheduler
    from attnserve.service.metrics import ServiceMetrics
    from attnserve.service.requests.frontend import RequestLayer

    engine = Engine(load_bundle(ROOT / "models" / "g2p-en"), threads=1)
    layer = RequestLayer(engine, Scheduler(engine, ServiceMetrics("t")))
    said = []
    for text in ("", "   ", "\n\t"):
        with pytest.raises(InvalidRequest) as caught:
            layer.read(text)
        said.append((caught.value.field, caught.value.message))
    assert said == [("inputs", "inputs: input text is empty")] * 3


def test_the_openai_routes_check_a_field_the_engine_sees_only_there(monkeypatch):
    """Each bound runs once per request: `check_ranges` leaves what `DecodingOptions` is given to it, and checks what
    never reaches the engine (a greedy request's top_p)."""
    from attnserve.service.http.openai import ranges

    checked = []
    monkeypatch.setattr(ranges, "check_bound", lambda option, value, name=None: checked.append(name))
    body = CompletionRequest(model="m", prompt="x", max_tokens=4, temperature=0.5, top_p=0.9, frequency_penalty=0.1, n=2)
    ranges.check_ranges(body, sampling=True)
    assert checked == ["n"]
    checked.clear()
    ranges.check_ranges(body.model_copy(update={"temperature": 0}), sampling=False)
    assert sorted(checked) == ["n", "top_p"]


def test_the_openai_param_of_a_value_of_none_of_a_fields_types_is_the_field():
    from fastapi.exceptions import RequestValidationError

    from attnserve.service.http.openai.errors import validation_error

    with pytest.raises(ValidationError) as caught:
        CompletionRequest.model_validate({"model": "m", "prompt": 42})
    err = validation_error(RequestValidationError(caught.value.errors()))
    assert err.param == "prompt" and err.message == "prompt: must be a string or a list"


def test_the_openai_routes_build_no_tgi_bodies_and_the_date_orders_are_written_once():
    """The OpenAI edge builds the request layer's requests, not TGI's parameters; date_order's choices and default
    live in the reader's table (service/text/forms.py `DATE_ORDERS`), which every other place reads."""
    openai = [p for p in (ROOT / "service" / "http" / "openai").glob("*.py") if "GenerateParameters" in p.read_text()]
    assert openai == []
    lines = [
        f"{p.relative_to(ROOT)}: {line}"
        for p in (ROOT / "service").rglob("*.py")
        for line in p.read_text(encoding="utf-8").splitlines()
        if "mdy" in line
    ]
    assert len(lines) <= 2, lines
