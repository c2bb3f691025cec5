"""The ranges of the OpenAI routes' numeric fields: the engine's (service/engine/options.py `BOUNDS`, each written
there once), except where OpenAI's API documents a narrower one or gives a value its own meaning (`NARROWER`).

The schemas (service/http/openai/schemas.py) check JSON types only. Each bound is checked once per request:
`DecodingOptions` checks the fields it is given as they were sent (`SEEN_BY_ENGINE`; its refusal is said by the
field's OpenAI name); `check_ranges` checks the narrower ranges, and the engine's range of every other numeric field
sent (a greedy request's `top_p`, which never reaches the engine; `n`), refusing the first one out of range with a
400 whose `param` names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from attnserve.service.engine.options import BOUNDS, Bound, InputError, check_bound
from attnserve.service.http.openai.errors import bad_request


@dataclass(frozen=True)
class Narrower:
    """An OpenAI field's own range, checked before the engine's; `off`: the value that means "unset" here (not
    passed on to the engine); `source`: where OpenAI (or the server whose extension it is) documents it."""

    bound: Bound
    source: str
    off: float | None = None


# OpenAI's documented ranges where they are narrower than the engine's, or where a value means "off".
NARROWER: Mapping[str, Narrower] = {
    # 0 is greedy decoding here (the engine's temperature must be > 0, so 0 is not passed on)
    "temperature": Narrower(Bound(0, 2), "OpenAI API reference, chat and completions: temperature between 0 and 2", off=0),
    "seed": Narrower(Bound(0, 2**63 - 1, integer=True), "OpenAI's OpenAPI description: seed is an int64"),
    "top_k": Narrower(Bound(-1, integer=True, note="0 or -1 = off"), "vLLM's extension: top_k -1 is off", off=-1),
}

# each numeric field of the OpenAI bodies -> the engine option whose range it has
OPTIONS: Mapping[str, str] = {
    "max_tokens": "max_new_tokens",
    "max_completion_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "n": "best_of",
    "best_of": "best_of",
    "num_beams": "num_beams",
    "min_tokens": "min_new_tokens",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
    "logprobs": "top_n_tokens",  # /v1/completions' (an integer); chat's is a boolean, and not checked here
    "top_logprobs": "top_n_tokens",
}


def documented(field: str) -> dict[str, float]:
    """The range of `field` as JSON Schema keywords, for /docs."""
    narrower = NARROWER.get(field)
    return (narrower.bound if narrower is not None else BOUNDS[OPTIONS[field]]).json_schema()


# the fields the engine's options are given as sent (whatever the request; with sampling, the sampling ones too)
SEEN_BY_ENGINE = frozenset(
    {"max_tokens", "max_completion_tokens", "frequency_penalty", "presence_penalty", "repetition_penalty", "num_beams"}
    | {"min_tokens"}
    | {"logprobs", "top_logprobs"}
)
SEEN_WHEN_SAMPLING = SEEN_BY_ENGINE | {"temperature", "top_p", "top_k", "seed"}


def check_ranges(body: BaseModel, sampling: bool) -> None:
    """A 400 naming a numeric field of `body` (an OpenAI request model) that is out of its range: its narrower one,
    or the engine's where the engine does not see the field (`SEEN_BY_ENGINE`, `SEEN_WHEN_SAMPLING`)."""
    seen = SEEN_WHEN_SAMPLING if sampling else SEEN_BY_ENGINE
    for field in body.model_fields_set & OPTIONS.keys():  # what was sent (a request sends few of them)
        option, value = OPTIONS[field], getattr(body, field)
        if value is None or isinstance(value, bool):
            continue
        narrower = NARROWER.get(field)
        if narrower is not None:
            if not narrower.bound.contains(value):
                raise bad_request(field, narrower.bound.refusal(field, value))
            if value == narrower.off:
                continue
        if field in seen:
            continue
        try:
            check_bound(option, value, field)
        except InputError as e:
            raise bad_request(field, str(e)) from None
