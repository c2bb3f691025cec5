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

import orjson

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("attnserve_request_id", default=None)

# LogRecord attributes that are not user `extra=` fields
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", "request_id"?, ...extra fields, "exc"?}` on one line."""

    _second, _stamp = -1, ""  # the last second formatted: a busy server logs many lines in each

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        out = {
            "ts": f"{self._stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = request_id_var.get()
        if rid is not None:
            out["request_id"] = rid
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key != "color_message":
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        try:  # orjson: a line per request under load (the access log)
            return orjson.dumps(out, default=str).decode()
        except TypeError:  # what orjson refuses outright (an int past 64 bits): the standard encoder
            return json.dumps(out, default=str)


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the root logger and uvicorn's loggers (which otherwise bring their own handlers)."""
    # the lines carry none of the caller's file and line, thread or process: not finding them is half of a
    # record's cost (the logging HOWTO's "Optimization"), and an access line is written per request
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # the app writes its own access line, with the request id
