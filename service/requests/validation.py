"""The one validator: a request -> a `ValidRequest` the engine can run, or an `InvalidRequest` naming its field.

Every front end builds its requests through `validate`: the TGI routes (/generate, /generate_stream, /,
/explain), the OpenAI routes (whose bodies become TGI parameters) and the in-process `Generator`
(service/client.py), so they refuse the same requests for the same reasons. The checks, in the order a
request meets them:

- the wire schema (service/http/schemas.py, service/http/openai/schemas.py) checks each field's JSON type;
- `validate` reads the input (its words, its length, `truncate`: the request layer's `TextFrontEnd.read`), then
  checks the output form, the decoding options and the per-request pronunciations;
- `Limits` is the one place a request is compared with the server's bounds (`max_new_tokens`, `max_best_of`,
  `max_top_n_tokens`, batch rows, `max_concurrent_requests`);
- `decoding_options` is the one place the engine's `DecodingOptions` is built from a request, its own checks
  (service/engine/options.py: every parameter's range and the rules across parameters) turned into refusals that
  name their field.

Every refusal is an `InvalidRequest` whose `field` names the part of the request at fault as a path in TGI's
body (`inputs`, `parameters.max_new_tokens`, `parameters` for the parameters together); the OpenAI layer maps
it to OpenAI's `param` with a table (service/http/openai/errors.py), and the in-process client raises it as an
`InputError` with the same `field`.

A new TGI parameter takes three steps: its field in `GenerateParameters` (service/http/schemas.py), its check
here (`UNSUPPORTED` while the engine cannot honour it, or a step in `Validator`), and its place in
`Validator.option_values`.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from attnserve.service.engine.engine import DecodingOptions, InputError
from attnserve.service.engine.options import BOUNDS, check_bound
from attnserve.service.engine.scheduler import check_rows
from attnserve.service.errors import InvalidRequest
from attnserve.service.requests.forms import OutputForm
from attnserve.service.requests.units import TextParams, Unit
from attnserve.service.text.pronunciations import Pronunciations, check_pronunciations
from attnserve.service.text.reader import Skipped

# ---- field names ------------------------------------------------------------------------------------
CLOSE_RATIO = 0.85
# fields other servers define whose names are close to one of this server's: a client that sends them means them
VENDOR_FIELDS = frozenset(
    {"min_new_tokens", "min_tokens", "max_length", "min_length", "top_a", "min_p", "stop_token_ids", "stop_sequences"}
)
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def normalise(name: str) -> str:
    """`maxNewTokens`, `Max-New-Tokens` -> `max_new_tokens`."""
    return _CAMEL.sub(r"_\1", name).replace("-", "_").lower()


def close_match(name: str, known: Collection[str]) -> str | None:
    """The known name `name` looks like a misspelling of; None when it is not close to any (or is a vendor's)."""
    norm = normalise(name)
    if norm in VENDOR_FIELDS:
        return None
    if norm in known:
        return norm
    found = difflib.get_close_matches(norm, known, n=1, cutoff=CLOSE_RATIO)
    return found[0] if found else None


def check_names(names: Iterable[str], known: Collection[str], where: str = "") -> None:
    """InvalidRequest for the first unknown field whose name looks like a misspelling of a known one ("did you mean");
    `where`: the path of the object they are in (`parameters.`)."""
    for name in names:
        meant = close_match(name, known)
        if meant is not None:
            raise InvalidRequest(name, f"{where}{name}", message=f"unknown field `{where}{name}`: did you mean `{where}{meant}`?")


# ---- the server's bounds ----------------------------------------------------------------------------
def invalid(field: str | None, message: str) -> InvalidRequest:
    """A refusal whose message is given whole (it names its field in its own words)."""
    return InvalidRequest(message, field, message=message)


@dataclass(frozen=True)
class Limits:
    """The server's bounds on a request; the one place they are compared. None: no bound (the in-process client,
    whose callers wait rather than being refused)."""

    max_new_tokens: int | None = None
    max_best_of: int | None = None
    max_top_n_tokens: int | None = None
    max_batch_size: int = 32
    max_concurrent_requests: int | None = None

    def new_tokens(self, n: int | None) -> int | None:
        """TGI's `max_new_tokens`: the server's bound is its default and its ceiling."""
        if self.max_new_tokens is None:
            return n
        n = self.max_new_tokens if n is None else n
        try:
            check_bound("max_new_tokens", n)
        except InputError as e:
            raise InvalidRequest(str(e), "parameters.max_new_tokens") from None
        if n > self.max_new_tokens:
            low = BOUNDS["max_new_tokens"].low
            raise invalid(
                "parameters.max_new_tokens",
                f"parameters.max_new_tokens must be between {low:g} and {self.max_new_tokens}, got {n}",
            )
        return n

    @staticmethod
    def at_most(field: str, value: int | None, limit: int | None, name: str | None = None, setting: str = "") -> None:
        """A value over its bound: `{name} must be at most {limit} on this server{setting}, got {value}`; `name`: the
        field as the front end calls it (default: `field`)."""
        if value is not None and limit is not None and value > limit:
            raise invalid(field, f"{name or field} must be at most {limit} on this server{setting}, got {value}")

    def n_best(
        self, best_of: int | None, num_beams: int | None, top_n_tokens: int | None, names: Mapping[str, str] | None = None
    ) -> None:
        """The bounds on n-best and alternatives (the engine checks the values themselves); `names`: how the front end
        calls `parameters.best_of`, `parameters.num_beams` and `parameters.top_n_tokens` (default: so)."""
        names = names or {}
        for field, value in (("parameters.best_of", best_of), ("parameters.num_beams", num_beams)):
            self.at_most(field, value, self.max_best_of, names.get(field))
        field = "parameters.top_n_tokens"
        self.at_most(field, top_n_tokens, self.max_top_n_tokens, names.get(field))

    def score_top_n_tokens(self, n: int) -> None:
        """POST /score's `top_n_tokens` within its range (the engine's) and `max_top_n_tokens`."""
        try:
            check_bound("top_n_tokens", n)
        except InputError as e:
            raise InvalidRequest(str(e), "parameters.top_n_tokens") from None
        if self.max_top_n_tokens is not None and n > self.max_top_n_tokens:
            limit = self.max_top_n_tokens
            raise invalid("parameters.top_n_tokens", f"parameters.top_n_tokens: at most {limit} (max_top_n_tokens)")

    def rows(self, options: DecodingOptions) -> None:
        """The batch rows a request needs (beams, best_of samples) within a batch (the scheduler's rule, `check_rows`)."""
        check_rows(options, self.max_batch_size)

    def requests(self, n: int, field: str | None, message: Callable[[int], str]) -> None:
        """Requests one call needs at once (an OpenAI body's prompts and samples) within `max_concurrent_requests`;
        `message(limit)` says what to send instead."""
        limit = self.max_concurrent_requests
        if limit is not None and n > limit:
            raise invalid(field, message(limit))


# ---- decoding options -------------------------------------------------------------------------------
def decoding_options(values: Mapping[str, Any], limits: Limits, stream: bool = False) -> DecodingOptions:
    """The engine's options of a request (keyword arguments of `DecodingOptions`), within the limits' batch rows;
    InvalidRequest naming the field (`parameters.temperature`) with the message `parameters: ...`. `stream`: a
    request whose answer is known only at its end is refused."""
    try:
        options = DecodingOptions(**values)
    except InputError as e:
        field = f"parameters.{e.field}" if e.field else "parameters"
        raise InvalidRequest(str(e), field, message=f"parameters: {e}") from None
    limits.rows(options)
    if stream and not options.streams:
        what = "beam search (best_of or num_beams without sampling)" if options.beam_search else "best_of > 1"
        raise InvalidRequest(
            f"{what} cannot be streamed: its answer is known only when every candidate has finished; "
            "use /generate (or stream: false)",
            "parameters",
        )
    return options


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
    def unsupported(p: Any) -> list[str]:
        """Names (with the value sent) of set TGI parameters this server cannot honour; unset (null, or TGI's neutral
        value) passes."""
        return [name for name, is_set in UNSUPPORTED if is_set(p)]

    def check_supported(self, p: Any) -> None:
        """InvalidRequest naming the set parameters this server cannot honour."""
        unsupported = self.unsupported(p)
        if unsupported:
            raise invalid("parameters", f"parameters not supported by this server: {', '.join(unsupported)}")

    def options(self, p: Any, stream: bool) -> DecodingOptions:
        """The decoding options of valid parameters, within the server's limits; InvalidRequest otherwise."""
        # every field, so a parameter added to the schema is in the key without a list to keep in step
        return self._options.get((stream, *p.__dict__.values()), lambda: self._check_options(p, stream))

    def _check_options(self, p: Any, stream: bool) -> DecodingOptions:
        n = self.limits.new_tokens(p.max_new_tokens)
        self.limits.n_best(p.best_of, p.num_beams, p.top_n_tokens)
        return decoding_options(self.option_values(p, n, stream), self.limits, stream)

    @staticmethod
    def option_values(p: Any, max_new_tokens: int, stream: bool) -> dict[str, Any]:
        """`DecodingOptions`' keyword arguments for TGI's parameters."""
        return {
            "max_new_tokens": max_new_tokens,
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


def text_params(p: Any) -> TextParams:
    """What the request layer reads of TGI's parameters beside the decoding options."""
    return TextParams(
        truncate=p.truncate,
        lexicon=p.lexicon is not False,
        context=p.context is not False,
        details=bool(p.details),
        decoder_input_details=bool(p.decoder_input_details),
        return_full_text=bool(p.return_full_text),
        punctuation=p.punctuation,  # None: the alphabet's default (TextParams)
        date_order=p.date_order or "mdy",
        alphabet=p.alphabet or "arpabet",
        stress=p.stress is not False,
        pronunciations=p.pronunciations,
        pronunciations_alphabet=p.pronunciations_alphabet,
        words_only=p.details == "words",
    )


# ---- the validated request --------------------------------------------------------------------------
@dataclass(frozen=True)
class ValidRequest:
    """A request every check has passed: its input read into units, its decoding options, what it asks of the text
    layer, its output form and pronunciations. `TextFrontEnd.admit` answers and queues it."""

    inputs: str
    params: TextParams
    options: DecodingOptions
    units: list[Unit]
    skipped: list[Skipped]
    form: OutputForm | None
    pronunciations: Pronunciations | None
    t_arrival: float


class Reads(Protocol):
    """What `validate` asks of the request layer (service/requests/frontend.py `TextFrontEnd`)."""

    engine: Any

    def output_form(self, params: TextParams) -> OutputForm | None: ...
    def read(
        self, text: str, truncate: int | None, punctuation: bool = False, date_order: str = "mdy"
    ) -> tuple[list[Unit], list[Skipped]]: ...


def validate(
    front: Reads,
    inputs: str,
    params: TextParams,
    options: DecodingOptions | Callable[[], DecodingOptions],
    check_units: Callable[[list[Unit]], None] | None = None,
) -> ValidRequest:
    """The one validation of a request, for every front end: the output form, the input read into units (and what
    the route asks of them, `check_units`), the decoding options (`options`, or what checks and makes them: called
    once the input is read, so a request wrong in both is told about its input first), the pronunciations. Raises
    InvalidRequest naming the field at fault."""
    t_arrival = time.perf_counter()
    form = front.output_form(params)
    units, skipped = front.read(inputs, params.truncate, params.punctuation, params.date_order)
    if check_units is not None:
        check_units(units)
    if callable(options):
        options = options()
    found = None
    if params.pronunciations:
        found = check_pronunciations(params.pronunciations, front.engine.tgt_tokenizer, params.pronunciations_alphabet)
    return ValidRequest(inputs, params, options, units, skipped, form, found, t_arrival)
