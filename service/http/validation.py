"""What the TGI routes' validation adds to the one validator (service/requests/validation.py): the body's unknown fields.

The schema (service/http/schemas.py) checks JSON types field by field; `Service.validate`
(service/http/state.py) hands the rest to `attnserve.service.requests.validation.validate`, which every front end
shares. Here (`check_field_names`): a generation parameter sent at the top level of the body, beside `inputs`, is a
422 saying to move it into `parameters`; an unknown field that looks like a misspelling of a known one is a 422
naming it; the others are ignored, logged once and named in a response header.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnserve.service.errors import InvalidRequest
from attnserve.service.http import fields
from attnserve.service.http.schemas import GenerateParameters, GenerateRequest
from attnserve.service.requests.validation import check_names, close_match


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
