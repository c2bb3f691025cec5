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

from collections.abc import Callable, Iterable
from typing import Any

from attnserve.service.engine.options import DecodingOptions
from attnserve.service.errors import InvalidRequest
from attnserve.service.http import fields
from attnserve.service.http.schemas import GenerateParameters, GenerateRequest
from attnserve.service.requests.request import OutputOptions, Request
from attnserve.service.requests.validation import Limits, check_names, close_match, decoding_options, invalid
from attnserve.service.text.options import ReadingOptions

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


# ---- TGI's parameters as the request's options ------------------------------------------------------------
# set TGI parameters this server cannot honour: (how it is named, whether it is set)
UNSUPPORTED: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("watermark=true", lambda p: bool(p.watermark)),
    ("grammar", lambda p: p.grammar is not None),
    ("adapter_id", lambda p: p.adapter_id is not None),
)
OPTIONS_MEMO = 1024  # parameter sets whose DecodingOptions are kept


class ParameterMemo:
    """What was made from a request's parameter set, kept by the set's values for the next request that sends the
    same set: at most `size` sets (seeds make many distinct ones: it starts again rather than grow). The key is the
    values as they are, lists (stop sequences) as tuples; a set with a value that cannot be a key is made each time.
    What `make` raises is not kept."""

    def __init__(self, size: int):
        self.size = size
        self._kept: dict[tuple, Any] = {}

    def get(self, values: Iterable[Any], make: Callable[[], Any]) -> Any:
        key = tuple(values)
        try:
            known = self._kept.get(key)
        except TypeError:  # a list, or a value that is no key (a grammar object): hashing tells, isinstance per field costs more
            key = tuple(tuple(v) if isinstance(v, list) else v for v in key)
            try:
                known = self._kept.get(key)
            except TypeError:
                return make()
        if known is None:
            known = make()
            if len(self._kept) >= self.size:
                self._kept.clear()
            self._kept[key] = known
        return known


class Validator:
    """TGI's parameters -> the engine's decoding options within the server's limits (`Limits`)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        # the options of parameter sets seen before: building and checking them costs the event loop about 10 us
        # of CPU per request, and most traffic repeats a few parameter sets; DecodingOptions is frozen, so rows
        # may share one
        self._options = ParameterMemo(OPTIONS_MEMO)

    @staticmethod
    def unsupported(p: GenerateParameters) -> list[str]:
        """Names (with the value sent) of set TGI parameters this server cannot honour; unset (null, or TGI's neutral
        value) passes."""
        return [name for name, is_set in UNSUPPORTED if is_set(p)]

    def check_supported(self, p: GenerateParameters) -> None:
        """InvalidRequest naming the set parameters this server cannot honour."""
        unsupported = self.unsupported(p)
        if unsupported:
            raise invalid("parameters", f"parameters not supported by this server: {', '.join(unsupported)}")

    def options(self, p: GenerateParameters, stream: bool) -> DecodingOptions:
        """The decoding options of valid parameters, within the server's limits; InvalidRequest otherwise."""
        # every field, so a parameter added to the schema is in the key without a list to keep in step
        return self._options.get((stream, *p.__dict__.values()), lambda: self._check_options(p, stream))

    def _check_options(self, p: GenerateParameters, stream: bool) -> DecodingOptions:
        n = self.limits.new_tokens(p.max_new_tokens)
        self.limits.n_best(p.best_of, p.num_beams, p.top_n_tokens)
        unset = p.num_beams is None and p.best_of is None  # the checkpoint's search defaults apply
        return decoding_options(self.option_values(p, n, stream), self.limits, stream, defaults=unset)

    @staticmethod
    def option_values(p: GenerateParameters, max_new_tokens: int, stream: bool) -> dict[str, Any]:
        """`DecodingOptions`' keyword arguments for TGI's parameters."""
        return {
            "max_new_tokens": max_new_tokens,
            "min_new_tokens": p.min_new_tokens or 0,
            "do_sample": bool(p.do_sample),
            "temperature": p.temperature,
            "top_k": p.top_k,
            "top_p": p.top_p,
            "repetition_penalty": p.repetition_penalty,
            "seed": p.seed,
            "stop": tuple(p.stop or ()),
            "logprobs": bool(p.details) or stream,  # TGI's tokens always carry a logprob where it shows them
            "typical_p": p.typical_p,
            "frequency_penalty": p.frequency_penalty,
            "presence_penalty": p.presence_penalty,
            "best_of": 1 if p.best_of is None else p.best_of,
            "num_beams": p.num_beams,
            "top_n_tokens": 0 if p.top_n_tokens is None else p.top_n_tokens,
            "token_text": bool(p.details) or stream,  # only a stream and TGI's details show each token's text
        }


def tgi_reading(p: GenerateParameters) -> ReadingOptions:
    """The reading options of TGI's parameters (null: the option's default)."""
    return ReadingOptions.of(
        p.alphabet,
        lexicon=p.lexicon,
        context=p.context,
        punctuation=p.punctuation,
        date_order=p.date_order,
        number_and=p.number_and,
        truncate=p.truncate,
        pronunciations=p.pronunciations,
        pronunciations_alphabet=p.pronunciations_alphabet,
        language=p.language,
    )


def tgi_output(p: GenerateParameters) -> OutputOptions:
    """The output options of TGI's parameters (null: the option's default; `details: "words"`: the words alone)."""
    return OutputOptions.of(
        alphabet=p.alphabet,
        stress=p.stress,
        details=None if p.details is None else bool(p.details),
        words_only=p.details in ("words", "sentences"),
        sentences=p.details == "sentences",
        decoder_input_details=p.decoder_input_details,
        return_full_text=p.return_full_text,
    )
