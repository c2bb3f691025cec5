"""What the TGI routes' validation adds to the one validator (service/requests/validation.py): the body's unknown fields.

The schema (service/http/schemas.py) checks types and ranges field by field; `Service.validate`
(service/http/state.py) hands the rest to `service.requests.validation.validate`, which every front end
shares. Here: an unknown field that looks like a misspelling of a known one is a 422 naming it
(`check_field_names`); the others are ignored, logged once and named in a response header.
"""

from __future__ import annotations

from service.http import fields
from service.http.schemas import GenerateParameters, GenerateRequest
from service.requests.validation import check_names


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
    check_names(body.model_extra or (), type(body).model_fields)
    if body.parameters is not None:
        check_names(body.parameters.model_extra or (), GenerateParameters.model_fields, "parameters.")
    fields.log_once(ignored_fields(body), "the TGI routes")


def ignored_headers(body: GenerateRequest) -> dict[str, str]:
    """The response header naming the body's ignored fields; {} when there are none."""
    names = ignored_fields(body)
    return {fields.HEADER: fields.header_value(names)} if names else {}
