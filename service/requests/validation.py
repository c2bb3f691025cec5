"""The one validator: an internal request (service/requests/request.py `Request`) -> a `ValidRequest` the engine can
run, or an `InvalidRequest` naming the option at fault.

Every front end builds its `Request` once at its edge (the TGI routes, the OpenAI routes, the in-process
`Generator`), and every one passes it through `validate`, so they refuse the same requests for the same reasons. The
checks, in the order a request meets them:

- the wire schema (service/http/schemas.py, service/http/openai/schemas.py) checks each field's JSON type;
- building the request checks its options: `DecodingOptions` its own ranges (service/engine/options.py `BOUNDS`)
  and rules across options (`decoding_options` turns them into refusals naming the option), `ReadingOptions` the
  date order;
- `Limits` is the one place a request is compared with the server's bounds (`max_new_tokens`, `max_best_of`,
  `max_top_n_tokens`, batch rows, `max_concurrent_requests`);
- `validate` reads the input (its words, its length, `truncate`: the request layer's `RequestLayer.read`), then
  checks the output form and the per-request pronunciations.

Every refusal is an `InvalidRequest` whose `field` is the internal name of what is at fault (`inputs`,
`max_new_tokens`, `date_order`, `parameters` for the options together); each front end says it in its own words
through its table of names (service/requests/request.py `say`).

Nothing here reads a wire schema: each front end's edge does (service/http/validation.py `tgi_request`,
service/http/openai/completions.py `plan`, service/client.py `Generator.request`).
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from attnserve.service.engine.engine import DecodingOptions, InputError
from attnserve.service.engine.options import BOUNDS, check_bound
from attnserve.service.engine.scheduler import check_rows
from attnserve.service.errors import InvalidRequest
from attnserve.service.requests.alphabets import OutputForm
from attnserve.service.requests.request import OptionRefused, OutputOptions, Request
from attnserve.service.requests.units import Unit
from attnserve.service.text.options import ReadingOptions
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
    # an imported checkpoint's search defaults (bundle.json `generation`), for requests that leave them unset
    default_new_tokens: int | None = None
    default_num_beams: int | None = None

    def new_tokens(self, n: int | None) -> int | None:
        """TGI's `max_new_tokens`: the server's bound is its default and its ceiling, and its range is the engine's
        low end (`BOUNDS`) to that ceiling: checked here, once, the engine's options built from a value within it."""
        if n is None and self.default_new_tokens is not None:
            n = min(self.default_new_tokens, self.max_new_tokens or self.default_new_tokens)
        if self.max_new_tokens is None:
            return n
        n = self.max_new_tokens if n is None else n
        bound = BOUNDS["max_new_tokens"]
        if not bound.contains(n):
            raise InvalidRequest(f"must be {bound.says()}, got {n!r}", "max_new_tokens")
        if n > self.max_new_tokens:
            raise invalid("max_new_tokens", f"max_new_tokens must be between {bound.low:g} and {self.max_new_tokens}, got {n}")
        return n

    @staticmethod
    def at_most(field: str, value: int | None, limit: int | None, setting: str = "") -> None:
        """A value over its bound: `{field} must be at most {limit} on this server{setting}, got {value}` (a front end
        says `field` in its own words)."""
        if value is not None and limit is not None and value > limit:
            raise invalid(field, f"{field} must be at most {limit} on this server{setting}, got {value}")

    def n_best(self, best_of: int | None, num_beams: int | None, top_n_tokens: int | None) -> None:
        """The bounds on n-best and alternatives (the engine checks the values themselves)."""
        self.at_most("best_of", best_of, self.max_best_of)
        self.at_most("num_beams", num_beams, self.max_best_of)
        self.at_most("top_n_tokens", top_n_tokens, self.max_top_n_tokens)

    def score_top_n_tokens(self, n: int) -> None:
        """POST /score's `top_n_tokens` within its range (the engine's) and `max_top_n_tokens`."""
        try:
            check_bound("top_n_tokens", n)
        except InputError as e:
            raise OptionRefused(str(e), "top_n_tokens") from None
        if self.max_top_n_tokens is not None and n > self.max_top_n_tokens:
            raise InvalidRequest(f"at most {self.max_top_n_tokens} (max_top_n_tokens)", "top_n_tokens")

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
def decoding_options(values: Mapping[str, Any], limits: Limits, stream: bool = False, defaults: bool = False) -> DecodingOptions:
    """The engine's options of a request (keyword arguments of `DecodingOptions`), within the limits' batch rows;
    OptionRefused naming the option (`temperature`) otherwise. `stream`: a request whose answer is known only at its
    end is refused. `defaults`: the request left its search unset, so an imported checkpoint's num_beams applies
    (TGI's routes without num_beams or best_of; OpenAI's without temperature: an explicit 0 stays greedy)."""
    try:
        options = DecodingOptions(**values)
        if defaults and limits.default_num_beams and not stream and values.get("num_beams") is None:
            if not options.sampling and not options.beam_search:  # the checkpoint's beam search, as its generate runs
                options = replace(options, num_beams=limits.default_num_beams)
    except InputError as e:
        raise OptionRefused(str(e), e.field or "parameters") from None
    limits.rows(options)
    if stream and not options.streams:
        what = "beam search (best_of or num_beams without sampling)" if options.beam_search else "best_of > 1"
        raise InvalidRequest(
            f"{what} cannot be streamed: its answer is known only when every candidate has finished; "
            "use /generate (or stream: false)",
            "parameters",
        )
    return options


# ---- the validated request --------------------------------------------------------------------------
@dataclass(frozen=True)
class ValidRequest:
    """A request every check has passed: the request, its input read into units, its output form and pronunciations.
    `RequestLayer.admit` answers and queues it."""

    request: Request
    units: list[Unit]
    skipped: list[Skipped]
    form: OutputForm | None
    pronunciations: Pronunciations | None
    t_arrival: float


class Reads(Protocol):
    """What `validate` asks of the request layer (service/requests/frontend.py `RequestLayer`)."""

    engine: Any

    def output_form(self, output: OutputOptions) -> OutputForm | None: ...
    def read(self, text: str, reading: ReadingOptions) -> tuple[list[Unit], list[Skipped]]: ...


def validate(front: Reads, request: Request, check_units: Callable[[list[Unit]], None] | None = None) -> ValidRequest:
    """The one validation of a request, for every front end: the output form, the input read into units (and what
    the route asks of them, `check_units`), the pronunciations. Raises InvalidRequest naming the option at fault."""
    t_arrival = time.perf_counter()
    form = front.output_form(request.output)
    reading = request.reading
    units, skipped = front.read(request.inputs, reading)
    if check_units is not None:
        check_units(units)
    found = None
    if reading.pronunciations:
        found = check_pronunciations(reading.pronunciations, front.engine.tgt_tokenizer, reading.pronunciations_alphabet)
    return ValidRequest(request, units, skipped, form, found, t_arrival)
