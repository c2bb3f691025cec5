"""Request validation beyond the schema: TGI's parameters -> the engine's decoding options, or a 422 saying what to fix.

After TGI's validation.rs: the schema (service/http/schemas.py) checks types and
ranges field by field; this module checks what needs the server's limits
(`max_new_tokens`, `max_best_of`, `max_top_n_tokens`, rows within `max_batch_size`)
and what spans several fields, then builds the engine's `DecodingOptions`. The input
itself (its words, its length, `truncate`) is read by the request layer
(service/text/requests.py), which every front end shares. Every generation route
(/generate, /generate_stream, /, /explain) checks its parameters here, so they refuse
the same requests with the same messages.

A new parameter takes three steps: its field in `GenerateParameters`
(schemas.py), its check here (`unsupported_parameters` while the engine
cannot honour it, or a step in `Validator.options`), and its place in
`decoding_options`. The engine's `DecodingOptions` checks values (a 422 with
its message); this module adds the server's limits and what cannot be streamed.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.engine import DecodingOptions, InputError
from service.engine.scheduler import check_rows
from service.http import errors, fields
from service.http.schemas import GenerateParameters, GenerateRequest


def unsupported_parameters(p: GenerateParameters) -> list[str]:
    """Names (with the value sent) of set TGI parameters this server cannot honour.

    TGI's parameters are all accepted by the schema; unset (null, or TGI's neutral value) passes here.
    """
    bad = []
    if p.watermark:
        bad.append("watermark=true")
    if p.grammar is not None:
        bad.append("grammar")
    if p.adapter_id is not None:
        bad.append("adapter_id")
    return bad


def ignored_fields(body: GenerateRequest) -> list[str]:
    """The body's unknown fields, those inside `parameters` as `parameters.NAME` (service/http/fields.py)."""
    names = list(body.model_extra or ())
    if body.parameters is not None and body.parameters.model_extra:
        names += [f"parameters.{n}" for n in body.parameters.model_extra]
    return names


def check_field_names(body: GenerateRequest) -> None:
    """APIError 422 for an unknown field that looks like a misspelling of one of this server's (did you mean ...?);
    the others are logged once per name."""
    names = ignored_fields(body)
    if not names:
        return
    for name in names:
        inside = name.startswith("parameters.")
        known = GenerateParameters.model_fields if inside else type(body).model_fields
        bare = name.removeprefix("parameters.") if inside else name
        meant = fields.close_match(bare, known)
        if meant is not None:
            where = "parameters." if inside else ""
            raise errors.validation(f"unknown field `{where}{bare}`: did you mean `{where}{meant}`?")
    fields.log_once(names, "the TGI routes")


def ignored_headers(body: GenerateRequest) -> dict[str, str]:
    """The response header naming the body's ignored fields; {} when there are none."""
    names = ignored_fields(body)
    return {fields.HEADER: fields.header_value(names)} if names else {}


OPTIONS_MEMO = 1024  # parameter sets whose DecodingOptions are kept


@dataclass(frozen=True)
class ValidRequest:
    """A request the engine can run: its source ids, its decoding options and the parameters as sent."""

    source_ids: list[int]
    options: DecodingOptions
    parameters: GenerateParameters


class Validator:
    """Checks a request's parameters against the server's limits."""

    def __init__(
        self,
        max_new_tokens: int,
        max_best_of: int = 4,
        max_top_n_tokens: int = 5,
        max_batch_size: int = 32,
    ):
        self.max_new_tokens = max_new_tokens
        self.max_best_of = max_best_of
        self.max_top_n_tokens = max_top_n_tokens
        self.max_batch_size = max_batch_size
        # the options of parameter sets seen before: building and checking them costs the event loop about 10 us
        # of CPU per request, and most traffic repeats a few parameter sets; DecodingOptions is frozen, so rows
        # may share one
        self._options: dict[tuple, DecodingOptions] = {}

    @staticmethod
    def check_supported(p: GenerateParameters) -> None:
        """APIError 422 naming the set parameters this server cannot honour."""
        unsupported = unsupported_parameters(p)
        if unsupported:
            raise errors.validation(f"parameters not supported by this server: {', '.join(unsupported)}")

    def options(self, p: GenerateParameters, stream: bool) -> DecodingOptions:
        """The decoding options of valid parameters, within the server's limits; APIError 422 otherwise.
        (A word-level request reads its input word by word, so its parameters are checked apart from it.)"""
        # every field, so a parameter added to the schema is in the key without a list to keep in step
        key = (stream, *[tuple(v) if isinstance(v, list) else v for v in p.__dict__.values()])
        try:
            known = self._options.get(key)
        except TypeError:  # a value that cannot be a key (a grammar object): checked each time, not kept
            return self._check_options(p, stream)
        if known is not None:
            return known
        options = self._check_options(p, stream)
        if len(self._options) >= OPTIONS_MEMO:  # seeds make many distinct sets: start again rather than grow
            self._options.clear()
        self._options[key] = options
        return options

    def _check_options(self, p: GenerateParameters, stream: bool) -> DecodingOptions:
        n = self.max_new_tokens if p.max_new_tokens is None else p.max_new_tokens
        if not 1 <= n <= self.max_new_tokens:
            raise errors.validation(f"parameters.max_new_tokens must be between 1 and {self.max_new_tokens}, got {n}")
        self.check_n_best(p, stream)
        options = self.decoding_options(p, n, stream)
        check_rows(options, self.max_batch_size)
        if stream and not options.streams:
            what = "beam search (best_of or num_beams without sampling)" if options.beam_search else "best_of > 1"
            raise errors.validation(
                f"parameters: {what} cannot be streamed: its answer is known only when every candidate has finished; "
                "use /generate (or stream: false)"
            )
        return options

    def check_n_best(self, p: GenerateParameters, stream: bool) -> None:
        """The server's limits on n-best and alternatives (the engine checks the values themselves)."""
        for name in ("best_of", "num_beams"):
            value = getattr(p, name)
            if value is not None and value > self.max_best_of:
                raise errors.validation(f"parameters.{name} must be at most {self.max_best_of} on this server, got {value}")
        if p.top_n_tokens is not None and p.top_n_tokens > self.max_top_n_tokens:
            raise errors.validation(
                f"parameters.top_n_tokens must be at most {self.max_top_n_tokens} on this server, got {p.top_n_tokens}"
            )

    @staticmethod
    def decoding_options(p: GenerateParameters, max_new_tokens: int, stream: bool) -> DecodingOptions:
        """The engine's options for the parameters; DecodingOptions' own checks become 422s."""
        try:
            return DecodingOptions(
                max_new_tokens=max_new_tokens,
                do_sample=bool(p.do_sample),
                temperature=p.temperature,
                top_k=p.top_k,
                top_p=p.top_p,
                repetition_penalty=p.repetition_penalty,
                seed=p.seed,
                stop=tuple(p.stop or ()),
                logprobs=bool(p.details) or stream,  # TGI's tokens always carry a logprob where it shows them
                typical_p=p.typical_p,
                frequency_penalty=p.frequency_penalty,
                presence_penalty=p.presence_penalty,
                best_of=p.best_of or 1,
                num_beams=p.num_beams,
                top_n_tokens=p.top_n_tokens or 0,
                token_text=bool(p.details) or stream,  # only a stream and TGI's details show each token's text
            )
        except InputError as e:
            raise errors.validation(f"parameters: {e}") from None
