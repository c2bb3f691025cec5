"""One error shape for every route: `{"error": "...", "error_type": "..."}` (ARCHITECTURE.md), and the status codes.

The engine and the text layer refuse or end a request with a `attnserve.service.errors.ServiceError`;
`api_error` is the one place its `error_type` becomes a status code (and an overloaded
refusal its Retry-After header).

FastAPI's own 422 body (a list of pydantic errors) and Starlette's 404/405
bodies are replaced by this shape. The front door (service/http/middleware.py) answers
an unexpected exception with `internal()` (a 500 that says nothing about the code; the detail goes to
the log, with the request id) and a body over `MAX_BODY_BYTES` with a 413, using `read_body`. A generation route's body
that is not JSON at all is `malformed_json`'s refusal (service/http/generation.py reads it).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive

from attnserve.service.errors import Draining, InvalidRequest, Overloaded, ServiceError, TimedOut, Unavailable
from attnserve.service.requests.request import OPTION_NAMES, OptionRefused, say

log = logging.getLogger("attnserve.service")

MAX_BODY_BYTES = 256 * 1024  # a G2P word is ~20 bytes; a generous ceiling for any text this service takes


class APIError(Exception):
    """An error answered to the client as `{"error", "error_type"}` with `status`. `field`: the part of the request
    at fault (`attnserve.service.errors.InvalidRequest.field`), which OpenAI's shape names as `param`; not in this
    shape's body."""

    def __init__(
        self, status: int, error_type: str, message: str, headers: dict[str, str] | None = None, field: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.headers = headers or {}
        self.field = field


STATUS = {"validation": 422, "overloaded": 429, "draining": 503, "unavailable": 503, "timeout": 504}


# The TGI routes' names of the request's options (service/requests/request.py `OPTION_NAMES`): a path in TGI's body.
# `field` of an APIError stays the internal name, which OpenAI's shape maps with its own table.
TGI_NAMES: Mapping[str, str] = {
    **{name: f"parameters.{name}" for name in OPTION_NAMES},
    "inputs": "inputs",
    "words_only": "parameters.details",  # `details: "words"`
    "sentences": "parameters.details",  # `details: "sentences"`
    "parameters": "parameters",  # the options together
    "targets": "targets",  # POST /score's
}


def tgi_message(e: InvalidRequest) -> str:
    """A refusal in the TGI routes' words: the engine's refusal of an option inside `parameters`, any other naming its
    field as a path in TGI's body."""
    if isinstance(e, OptionRefused):
        return f"parameters: {e.message}"
    return say(e, TGI_NAMES)[1]


def api_error(e: ServiceError) -> APIError:
    """An engine or text outcome as the client gets it: its status code, and Retry-After when overloaded; a refusal
    in the TGI routes' words (`tgi_message`)."""
    headers = {"Retry-After": str(e.retry_after_s)} if isinstance(e, Overloaded) else None
    if isinstance(e, InvalidRequest):
        return APIError(422, e.error_type, tgi_message(e), headers, e.field)
    return APIError(STATUS.get(e.error_type, 500), e.error_type, e.message, headers)


def validation(message: str, field: str | None = None) -> APIError:
    return APIError(422, "validation", message, field=field)


def overloaded(retry_after_s: int) -> APIError:
    return api_error(Overloaded(retry_after_s))


def draining() -> APIError:
    return api_error(Draining())


def unavailable(message: str) -> APIError:
    return api_error(Unavailable(message))


def timeout(limit_s: float) -> APIError:
    return api_error(TimedOut(limit_s))


def internal() -> APIError:
    """An unexpected exception, as the client sees it: nothing about the code (the log has the details)."""
    return APIError(500, "internal", "internal server error; the server log has the details")


def error_body(error_type: str, message: str) -> dict[str, str]:
    return {"error": message, "error_type": error_type}


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(error_body(err.error_type, err.message), status_code=err.status, headers=err.headers)


_NON_FINITE = re.compile(rb"(?<![\w\"])-?(?:NaN|Infinity)(?![\w\"])")


def malformed_json(raw: bytes, reason: str) -> str:
    """What is wrong with a body that is not JSON, for a 422 `validation`: not UTF-8, nested too deep, a
    non-finite number, or where the syntax breaks. One wording for every route: the generation routes' parser
    and FastAPI's both come here, with the raw body and their parser's reason."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"the request body is not valid UTF-8 (byte {u.start}); JSON text must be UTF-8"
    if reason.startswith("depth limit exceeded"):
        return "the request body is not valid JSON: it is nested too deeply (arrays and objects at most 1024 levels deep)"
    if _NON_FINITE.search(raw):
        return "the request body is not valid JSON: NaN and Infinity are not JSON numbers; every number must be finite"
    return f"the request body is not valid JSON ({reason})"


def json_refusal(body: object) -> str:
    """The message for a body FastAPI's parser refused (`json_invalid`): its raw text is parsed again with
    the generation routes' parser, so /explain words it exactly as /generate does."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if not isinstance(raw, bytes):
        return "the request body is not valid JSON"
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return malformed_json(raw, str(e))
    return "the request body is not valid JSON"


def declared_json(content_type: bytes | None) -> bool:
    """Whether a body is to be read as JSON: declared so, or not declared at all (FastAPI reads that as JSON too)."""
    return content_type is None or content_type.split(b";")[0].strip().lower() == b"application/json"


# what a value must be, by pydantic's error type: how a field that takes several types is said in one message
EXPECTED = {
    "string_type": "a string",
    "list_type": "a list",
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
}
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def is_type_tag(part: object) -> bool:
    """Whether a part of an error's location is pydantic's name for one type of a field that takes several
    (`prompt.str`, `prompt.list[str]`, `details.literal['words']`): the schema's internals, never shown."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part or part.startswith("function-"))


def _expected(err: dict) -> str | None:
    if err.get("type") == "literal_error":
        return (err.get("ctx") or {}).get("expected")
    return EXPECTED.get(err.get("type", ""))


def describe_validation_errors(errors: list[dict], body: object = None) -> str:
    """pydantic's error list -> one line a person can act on: `parameters.top_p: Input should be ...; ...`. A field
    is named once, as the request spells it: a value of none of a field's types says what it may be (`prompt: must
    be a string or a list`), never the schema's names for them."""
    parts: dict[str, list[dict]] = {}
    for err in errors:
        if err.get("type") == "json_invalid":
            return json_refusal(body)
        loc = [str(x) for x in err.get("loc", ()) if x != "body" and not is_type_tag(x)]
        parts.setdefault(".".join(loc) or "body", []).append(err)
    out = []
    for where, found in parts.items():
        err = found[0]
        msg = err.get("msg", "invalid")
        if err.get("type") == "missing":
            msg = "is required"
        elif err.get("type") in ("model_attributes_type", "model_type", "dict_type") and where == "body":
            msg = 'must be a JSON object like {"inputs": "...", "parameters": {...}}'
        elif len(found) > 1 or err.get("type") in ("model_type", "model_attributes_type"):
            expected = [e for e in map(_expected, found) if e]
            msg = (
                f"must be {' or '.join(expected)}" if len(expected) == len(found) else "; ".join(e.get("msg", "") for e in found)
            )
        out.append(f"{where}: {msg}")
    return "; ".join(out) or "invalid request"


def install_error_handlers(app: FastAPI, on_error: Callable[[Request, APIError], None] | None = None) -> None:
    """Route every error through the one shape; `on_error(request, err)` counts it (metrics)."""

    def answer(request: Request, err: APIError) -> JSONResponse:
        if on_error is not None:
            on_error(request, err)
        return error_response(err)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return answer(request, exc)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return answer(request, api_error(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return answer(request, validation(describe_validation_errors(list(exc.errors()), exc.body)))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "validation"}
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; see /docs"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see /docs"
        elif exc.status_code == 400 and message == "There was an error parsing the body":  # FastAPI's, for a body
            # its JSON parser raised on other than a syntax error (not UTF-8, nested too deep): the documented 422
            return answer(request, validation("the request body is not valid JSON: not UTF-8, or nested too deeply"))
        return answer(request, APIError(exc.status_code, kinds.get(exc.status_code, "http"), message, dict(exc.headers or {})))


async def read_body(receive: Receive, limit: int) -> tuple[bytes, bool] | None:
    """A request's body, read until its end or until it is past `limit` bytes (longer than `limit`: too large;
    at most one message past it is ever held): (body, whether more of it is left unread); None when the client
    went away first."""
    chunks, size, more = [], 0, False
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
        if not more or size > limit:
            return b"".join(chunks), more


def replaying(body: bytes, more: bool, receive: Receive) -> Receive:
    """A receive that gives `body` (already read) first, then goes on with `receive` (the rest of the body, or
    http.disconnect when the client goes away)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replay
