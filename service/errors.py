"""Outcomes that end or refuse a request, in words a client may read, without HTTP.

The engine (the scheduler's admission and its engine thread) and the text layer raise or
report these; `service/http/errors.py` alone maps each `error_type` to a status code and
the one error shape (ARCHITECTURE.md). The in-process API reads them as they are.
"""

from __future__ import annotations

import math


class ServiceError(Exception):
    """A request refused or ended: `error_type` names the outcome (the wire's `error_type`), `message` says
    what happened and what to do."""

    error_type = "internal"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(ServiceError):
    """Input or parameters the server cannot run. `field` names the part of the request at fault by its internal
    name (`inputs`, an option of the request: `best_of`, `date_order`; `parameters` for the options together,
    `targets`): each front end maps it to its own wire name (service/requests/request.py `say`) without reading the
    message. It prefixes the message (`inputs: ...`) unless `message` gives the whole text (`whole`)."""

    error_type = "validation"

    def __init__(self, reason: str, field: str | None = None, *, message: str | None = None):
        super().__init__(message if message is not None else f"{field}: {reason}" if field else reason)
        self.reason = reason  # the message without its field
        self.field = field
        self.whole = message is not None  # the message was given whole: it names its field in its own words


class Overloaded(ServiceError):
    """Queued + running requests at their bound; `retry_after_s`: when to try again."""

    error_type = "overloaded"

    def __init__(self, retry_after_s: int):
        super().__init__(f"the server is at its bound of queued + running requests; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class Draining(ServiceError):
    error_type = "draining"

    def __init__(self):
        super().__init__("the server is shutting down and takes no new requests; send it to another replica")


class Unavailable(ServiceError):
    """The engine is not running (stopping, or stopped after a failure)."""

    error_type = "unavailable"


class TimedOut(ServiceError):
    error_type = "timeout"

    def __init__(self, limit_s: float):
        super().__init__(f"the request did not finish within the server's request timeout of {limit_s:g} s")
        self.limit_s = limit_s


def retry_after_s(mean_request_s: float, turns: float) -> int:
    """Seconds a refused client should wait: the queue ahead turning over `turns` times at `mean_request_s`
    each (at least once), between 1 and 60."""
    return int(min(60, max(1, math.ceil(mean_request_s * max(1.0, turns)))))
