"""The TGI routes' edge: a TGI body -> the internal request (`tgi_request`), and the body's unknown fields.

The schema (service/http/schemas.py) checks JSON types field by field; `tgi_request` is the one place TGI's
parameters become the request layer's `Request` (service/requests/request.py), every default resolved, which
`Service.validate` (service/http/state.py) hands to the one validator every front end shares
(`attnserve.service.requests.validation.validate`). A refusal names an internal option; the TGI routes say it as a
path in their body (service/http/errors.py `TGI_NAMES`). Here too (`check_field_names`): a generation parameter
sent at the top level of the body, beside `inputs`, is a 422 saying to move it into `parameters`; an unknown field
that looks like a misspelling of a known one is a 422 naming it; the others are ignored, logged once and named in a
response header.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnserve.service.errors import InvalidRequest
from attnserve.service.http import fields
from attnserve.service.http.schemas import GenerateParameters, GenerateRequest
from attnserve.service.requests.request import Request
from attnserve.service.requests.validation import Validator, check_names, close_match, tgi_output, tgi_reading

NO_PARAMETERS = GenerateParameters()  # a body without `parameters`: every default


def tgi_request(body: GenerateRequest, stream: bool, validator: Validator) -> Request:
    """The internal request of a TGI body: its decoding options (within the server's limits: `validator`), reading
    options and output options. InvalidRequest naming the option at fault."""
    p = body.parameters or NO_PARAMETERS
    check_field_names(body)
    validator.check_supported(p)
    return Request(body.inputs, validator.options(p, stream), tgi_reading(p), tgi_output(p))


def ignored_fields(body: GenerateRequest) -> list[str]:
    """The body's unknown fields, those inside `parameters` as `parameters.NAME` (service/http/fields.py)."""
    names = list(body.model_extra or ())
    if body.parameters is not None and body.parameters.model_extra:
        names += [f"parameters.{n}" for n in body.parameters.model_extra]
    return names


def check_field_names(body: GenerateRequest) -> None:
    """InvalidRequest 422 for an unknown field that looks like a misspelling of one of this server's (did you mean
    ...?); the others are logged once per name."""
    if not body.model_extra and (body.parameters is None or not body.parameters.model_extra):
        return
    misplaced(body.model_extra or ())
    check_names(body.model_extra or (), type(body).model_fields)
    if body.parameters is not None:
        check_names(body.parameters.model_extra or (), GenerateParameters.model_fields, "parameters.")
    fields.log_once(ignored_fields(body), "the TGI routes")


def misplaced(names: Iterable[str]) -> None:
    """InvalidRequest 422 for a generation parameter (or a name close to one) at the top level of a TGI body: TGI
    reads them only inside `parameters`, so one sent beside `inputs` would otherwise be ignored."""
    for name in names:
        meant = close_match(name, GenerateParameters.model_fields)
        if meant is not None:
            message = (
                f"`{name}` is a generation parameter, sent at the top level of the body: move it into `parameters`, "
                f'as {{"inputs": "...", "parameters": {{"{meant}": ...}}}}'
            )
            raise InvalidRequest(message, name, message=message)


def ignored_headers(body: GenerateRequest) -> dict[str, str]:
    """The response header naming the body's ignored fields; {} when there are none."""
    names = ignored_fields(body)
    return {fields.HEADER: fields.header_value(names)} if names else {}
