"""OpenAI's error shape on /v1/*: `{"error": {"message", "type", "param", "code"}}` (docs/ARCHITECTURE.md records the exception).

The TGI routes keep the project's `{"error", "error_type"}`. Here the same outcomes keep their status codes
(a 422 becomes OpenAI's 400) and their `error_type` becomes `code`, so the metrics' `outcome` label does
not change; `type` is the one OpenAI's clients expect for the status. Three ways in:

- `OpenAIError`, raised by these routes with the `param` at fault;
- `from_error`, for what the shared layers raise (`InvalidRequest`, said through the route's table of names:
  `PARAMS`, `CHAT_PARAMS`; `APIError`, `ServiceError`, FastAPI's validation error);
- `OpenAIErrorShape`, an ASGI middleware that reshapes the project's error bodies answered on /v1/* before any
  route ran (the body-size limit's 413, an unknown path's 404, a wrong method's 405).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attnserve.service.errors import InvalidRequest, ServiceError
from attnserve.service.http import errors
from attnserve.service.requests.request import say

PREFIX = "/v1/"

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


class OpenAIError(Exception):
    """An error answered in OpenAI's shape. `outcome`: the metrics' outcome label (the project's error_type)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        outcome: str = "validation",
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code if code is not None else outcome
        self.outcome = outcome
        self.headers = headers or {}

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": TYPES.get(self.status, "api_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> Response:
        return Response(orjson.dumps(self.body()), status_code=self.status, headers=self.headers, media_type="application/json")


def bad_request(param: str | None, message: str) -> OpenAIError:
    """A 400 naming the field at fault; the message says what to send instead."""
    return OpenAIError(400, message, param=param)


# The request layer names the option at fault by its internal name (`InvalidRequest.field`: service/requests/request.py
# `OPTION_NAMES`); OpenAI's `param` is the field its body sent it in. One table per route (and per name its body may
# give max_tokens), every option these routes set in it (tests/requests/ checks).
PARAMS: Mapping[str, str] = MappingProxyType(
    {
        "inputs": "prompt",
        "max_new_tokens": "max_tokens",
        "do_sample": "temperature",  # sampling is on when temperature > 0
        "temperature": "temperature",
        "top_k": "top_k",
        "top_p": "top_p",
        "repetition_penalty": "repetition_penalty",
        "frequency_penalty": "frequency_penalty",
        "presence_penalty": "presence_penalty",
        "seed": "seed",
        "stop": "stop",
        "best_of": "best_of",
        "num_beams": "num_beams",
        "min_new_tokens": "min_tokens",
        "top_n_tokens": "logprobs",
        # extra body fields of the same names
        "lexicon": "lexicon",
        "context": "context",
        "punctuation": "punctuation",
        "date_order": "date_order",
        "number_and": "number_and",
        "pronunciations": "pronunciations",
        "pronunciations_alphabet": "pronunciations_alphabet",
        "language": "language",
        "alphabet": "alphabet",
        "stress": "stress",
        "details": "details",
        "words_only": "details",
        "sentences": "details",
        # OpenAI's own fields, checked against the server's limits by the request layer's `Limits`
        "n": "n",
        "stream_options": "stream_options",
    }
)
CHAT_PARAMS: Mapping[str, str] = MappingProxyType(
    {**PARAMS, "inputs": "messages", "best_of": "n", "top_n_tokens": "top_logprobs", "max_new_tokens": "max_completion_tokens"}
)
CHAT_MAX_TOKENS_PARAMS: Mapping[str, str] = MappingProxyType({**CHAT_PARAMS, "max_new_tokens": "max_tokens"})


def param_table(input_param: str = "prompt", max_tokens_name: str = "max_tokens") -> Mapping[str, str]:
    """The table of a route: `input_param` is the field its text came in (`prompt`, `messages`), `max_tokens_name`
    the field the body gave max_new_tokens in (chat: `max_completion_tokens` or `max_tokens`)."""
    if input_param == "prompt":
        return PARAMS
    return CHAT_PARAMS if max_tokens_name == "max_completion_tokens" else CHAT_MAX_TOKENS_PARAMS


def said(e: InvalidRequest, params: Mapping[str, str]) -> tuple[str | None, str]:
    """A refusal in OpenAI's words: its `param`, and its message; a message given whole names the field by its
    OpenAI name, any other is as the request layer says it (`field: reason`)."""
    param, message = say(e, params)
    return param, message if e.whole else e.message


def from_error(err: Exception, params: Mapping[str, str] = PARAMS) -> OpenAIError:
    """What the shared layers raise, in OpenAI's shape: `APIError` and `ServiceError` keep their status (422: 400),
    Retry-After and error_type (as `code`); a refusal's field becomes `param` through `params` (`param_table`)."""
    if isinstance(err, OpenAIError):
        return err
    if isinstance(err, RequestValidationError):
        return validation_error(err)
    if isinstance(err, InvalidRequest):
        param, message = said(err, params)
        return OpenAIError(400, message, param=param, outcome=err.error_type)
    if isinstance(err, ServiceError):
        err = errors.api_error(err)
    if not isinstance(err, errors.APIError):
        raise TypeError(f"not an API error: {type(err).__name__}")
    status = 400 if err.status == 422 else err.status
    param = params.get(err.field) if status == 400 and err.field is not None else None
    return OpenAIError(status, err.message, param=param, outcome=err.error_type, headers=err.headers)


def validation_error(exc: RequestValidationError) -> OpenAIError:
    """FastAPI's body validation error: a 400 naming the first field at fault (`messages.0.role`)."""
    found = list(exc.errors())
    first = found[0] if found else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body" and not errors.is_type_tag(x)]
    param = None if first.get("type") == "json_invalid" else ".".join(loc) or None  # (a JSON error's loc is a position)
    return OpenAIError(400, errors.describe_validation_errors(found), param=param)


def reshape(body: bytes, status: int) -> bytes | None:
    """A project error body (`{"error": str, "error_type": str}`) in OpenAI's shape; None when it is not one."""
    try:
        old = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(old, dict) and isinstance(old.get("error"), str) and "error_type" in old):
        return None
    err = OpenAIError(400 if status == 422 else status, old["error"], outcome=old["error_type"])
    return orjson.dumps(err.body())


class OpenAIErrorShape:
    """ASGI middleware: on /v1/* paths, an error answered in the project's shape by a layer in front of the
    routes (the body-size limit, routing) is answered in OpenAI's. Other paths pass untouched."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def send_shaped(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message  # held until the body is known
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            status = start["status"]
            shaped = reshape(body, status)
            if shaped is not None:
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(shaped)).encode()))
                start = {**start, "status": 400 if status == 422 else status, "headers": headers}
                body = shaped
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_shaped)
