"""Structured logs: one JSON object per line, carrying the request id of the request being served.

The request id lives in a context variable set by the HTTP middleware
(service/http/middleware.py), so any log line written while serving a request (the route,
the error handlers, uvicorn's own) carries it without passing it around.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import TextIO

import orjson

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("attnserve_request_id", default=None)

# LogRecord attributes that are not user `extra=` fields
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", "request_id"?, ...extra fields, "exc"?}` on one line."""

    _second, _stamp = -1, ""  # the last second formatted: a busy server logs many lines in each

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            key: value
            for key, value in vars(record).items()
            if key not in _STANDARD and not key.startswith("_") and key != "color_message"
        }
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        return self.line(record.created, record.msecs, record.levelname.lower(), record.name, record.getMessage(), fields)

    def line(self, created: float, msecs: float, level: str, logger: str, msg: str, fields: dict) -> str:
        """The line of a record made at `created` (time.time(); `msecs` its milliseconds) with these `fields`."""
        second = int(created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        out = {"ts": f"{self._stamp}.{int(msecs):03d}Z", "level": level, "logger": logger, "msg": msg}
        rid = request_id_var.get()
        if rid is not None:
            out["request_id"] = rid
        out.update(fields)
        try:  # orjson: a line per request under load (the access log)
            return orjson.dumps(out, default=str).decode()
        except TypeError:  # what orjson refuses outright (an int past 64 bits): the standard encoder
            return json.dumps(out, default=str)


class JsonLinesHandler(logging.StreamHandler):
    """The handler `configure_logging` installs: JsonFormatter's lines on a stream."""

    def __init__(self, stream: TextIO):
        super().__init__(stream)
        self.setFormatter(JsonFormatter())

    def write_line(self, line: str) -> None:
        """A line already formatted, as `emit` writes one, and as `emit` does, a failed write reported by
        `handleError` (once, on stderr; the caller goes on)."""
        self.acquire()
        try:
            self.stream.write(line + self.terminator)
            self.flush()
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:  # noqa: BLE001 - logging's own rule for a handler that cannot write
            self.handleError(logging.makeLogRecord({"msg": line}))
        finally:
            self.release()


def direct_handler(logger: logging.Logger, level: int) -> JsonLinesHandler | None:
    """The handler a line of `level` from `logger` reaches, when it is the only one, a JsonLinesHandler with its own
    formatter, and nothing on the way may drop or change the line (no filter on the logger or the handler): the
    line it would write can then be written to it directly (`log_line`). None otherwise: logging decides."""
    if not logger.isEnabledFor(level) or logger.filters:  # isEnabledFor: the level, logging.disable and `disabled`
        return None
    found = None
    node: logging.Logger | None = logger
    while node is not None:  # the walk Logger.callHandlers makes
        for handler in node.handlers:
            if (
                found is not None
                or type(handler) is not JsonLinesHandler
                or type(handler.formatter) is not JsonFormatter
                or handler.filters
                or level < handler.level
            ):
                return None
            found = handler
        node = node.parent if node.propagate else None
    return found


def log_line(logger: logging.Logger, level: int, msg: str, fields: dict) -> None:
    """`logger.log(level, msg, extra=fields)`, the same line, without a LogRecord where `direct_handler` finds the
    handler: a record's making and its way through the logger hierarchy cost a request's access line about 20 µs of
    the event loop's CPU on a 2-core VM, the largest part of the front door's work (docs/BENCHMARKS.md, the serving
    tax). Wherever the configuration is another (a filter, a second handler, another formatter), logging writes it."""
    handler = direct_handler(logger, level)
    if handler is None:
        logger.log(level, msg, extra=fields)
        return
    created = time.time()
    name = logging.getLevelName(level).lower()
    handler.write_line(handler.formatter.line(created, (created - int(created)) * 1000, name, logger.name, msg, fields))


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the root logger and uvicorn's loggers (which otherwise bring their own handlers)."""
    # the lines carry none of the caller's file and line, thread or process: not finding them is half of a
    # record's cost (the logging HOWTO's "Optimization"), and an access line is written per request
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = JsonLinesHandler(sys.stderr)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # the app writes its own access line, with the request id
