"""The access log: one JSON line per request, with its request id, status and duration, through a real uvicorn
server; written without a LogRecord in the configuration `configure_logging` installs, and through logging, the
same line, wherever a filter or another handler may have its say."""

from __future__ import annotations

import io
import json
import logging
import re

import httpx
import pytest
from service_harness import serving

from attnserve.service.http.logs import JsonLinesHandler, configure_logging, direct_handler, log_line, request_id_var

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture()
def logged():
    """configure_logging's setup, its stream a StringIO; the root logger's handlers and level restored after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access = logging.getLogger("attnserve.access")
    configure_logging("info")
    buf = io.StringIO()
    root.handlers[0].setStream(buf)
    try:
        yield buf
    finally:
        access.filters.clear()
        root.handlers[:] = handlers
        root.setLevel(level)


def only_configure_loggings_handler() -> None:
    """pytest adds its capturing handlers to the root logger for each test's call: as a second handler would, they
    send every line through logging. Gone for the test, the root logger is as `attnserve-serve` configures it."""
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if type(h) is JsonLinesHandler]


def lines(buf: io.StringIO, logger: str) -> list[dict]:
    out = [json.loads(line) for line in buf.getvalue().splitlines()]
    return [x for x in out if x["logger"] == logger]


def test_every_request_gets_one_access_line_with_its_id_status_and_duration(logged, tiny_bundle_dir):
    only_configure_loggings_handler()
    assert isinstance(direct_handler(logging.getLogger("attnserve.access"), logging.INFO), JsonLinesHandler)
    with serving(tiny_bundle_dir) as s:
        ok = httpx.post(s.url + "/generate", json={"inputs": "cat"}, headers={"x-request-id": "req-7"}, timeout=30)
        bad = httpx.post(s.url + "/generate_stream", json={"inputs": ""}, headers={"x-request-id": "req-8"}, timeout=30)
        health = httpx.get(s.url + "/health", timeout=30)
    assert (ok.status_code, bad.status_code, health.status_code) == (200, 422, 200)
    access = lines(logged, "attnserve.access")
    by_id = {x["request_id"]: x for x in access}
    assert len(access) == 3 and set(by_id) == {"req-7", "req-8", health.headers["x-request-id"]}, access
    line = by_id["req-7"]
    assert list(line) == ["ts", "level", "logger", "msg", "request_id", "method", "path", "status", "duration_ms"]
    assert TS.match(line["ts"]) and line["level"] == "info" and line["msg"] == "POST /generate 200"
    assert (line["method"], line["path"], line["status"]) == ("POST", "/generate", 200)
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert (by_id["req-8"]["path"], by_id["req-8"]["status"]) == ("/generate_stream", 422)
    assert (by_id[health.headers["x-request-id"]]["method"], by_id[health.headers["x-request-id"]]["status"]) == ("GET", 200)


def test_the_direct_line_is_the_line_logging_writes(logged):
    only_configure_loggings_handler()
    access = logging.getLogger("attnserve.access")
    assert direct_handler(access, logging.INFO) is not None
    fields = {"method": "POST", "path": "/generate", "status": 200, "duration_ms": 1.25}
    token = request_id_var.set("req-9")
    try:
        log_line(access, logging.INFO, "POST /generate 200", fields)  # direct
        handler = logging.getLogger().handlers[0]
        handler.addFilter(lambda record: True)  # a filter: logging writes the line
        assert direct_handler(access, logging.INFO) is None
        log_line(access, logging.INFO, "POST /generate 200", fields)
        handler.filters.clear()
    finally:
        request_id_var.reset(token)
    direct, through_logging = lines(logged, "attnserve.access")
    assert TS.match(direct["ts"]) and TS.match(through_logging["ts"])
    del direct["ts"], through_logging["ts"]
    assert list(direct.items()) == list(through_logging.items())
    assert direct["request_id"] == "req-9" and direct["duration_ms"] == 1.25


def test_a_filter_a_second_handler_or_a_level_still_decide(logged):
    only_configure_loggings_handler()
    access = logging.getLogger("attnserve.access")
    fields = {"method": "GET", "path": "/health", "status": 200, "duration_ms": 0.5}
    access.addFilter(lambda record: False)  # drops every access line
    log_line(access, logging.INFO, "GET /health 200", fields)
    assert lines(logged, "attnserve.access") == []
    access.filters.clear()

    seen: list[logging.LogRecord] = []
    second = logging.Handler()
    second.emit = seen.append
    logging.getLogger().addHandler(second)
    log_line(access, logging.INFO, "GET /health 200", fields)
    logging.getLogger().removeHandler(second)
    assert len(lines(logged, "attnserve.access")) == 1
    assert len(seen) == 1 and seen[0].getMessage() == "GET /health 200" and seen[0].path == "/health"

    logging.getLogger().setLevel(logging.WARNING)  # --log-level warning: no access lines
    assert direct_handler(access, logging.INFO) is None
    log_line(access, logging.INFO, "GET /health 200", fields)
    assert len(lines(logged, "attnserve.access")) == 1


def test_a_stream_that_fails_is_reported_once_and_the_request_goes_on(logged, monkeypatch):
    """A write that fails (here: the flush after it) is told as logging tells it, once (Handler.handleError), and the
    line is not written a second time; log_line returns, so the request it closes is answered all the same."""
    only_configure_loggings_handler()

    class FlushFails(io.StringIO):
        def flush(self):
            raise OSError("disk full")

    handler = logging.getLogger().handlers[0]
    broken = FlushFails()
    handler.setStream(broken)
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    access = logging.getLogger("attnserve.access")
    log_line(access, logging.INFO, "GET /health 200", {"method": "GET", "path": "/health", "status": 200, "duration_ms": 0.5})
    assert len(reported) == 1 and '"GET /health 200"' in reported[0].getMessage()
    assert len(broken.getvalue().splitlines()) == 1
