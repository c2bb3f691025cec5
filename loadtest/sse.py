"""A streamed answer's server-sent events, read one line at a time: the one parser of `attnserve-loadtest`
(loadtest/client.py) and the Locust user (loadtest/locustfile.py).

TGI's `/generate_stream` sends `data:{"token": ..., "generated_text": null}` per token, the last event carrying
`generated_text`; OpenAI's streamed completions send `data: {"choices": [...]}` chunks, one with a
`finish_reason`, an optional usage chunk and `data: [DONE]`. Either may send `data:{"error": ...}` instead.
The parser does no I/O: the caller reads the lines, notes the time each arrived and decides what an
incomplete stream means.
"""

from __future__ import annotations

import json


class StreamTally:
    """What a stream's events said so far: the arrival times of its first token and of its final event, the
    tokens counted, the server's own count (OpenAI's usage chunk) and whether an error event came (`failed`, `error`).

    `feed(line, now)` reads one line (bytes, or text already decoded) that arrived at `now`; it returns True
    when the stream is over for the reader: the final TGI event, OpenAI's `[DONE]`, or an error event. Lines
    that are not `data:` lines (blank separators, comments, `event:` lines) are skipped. An event that is not
    JSON raises json.JSONDecodeError (bytes that are not UTF-8: UnicodeDecodeError), as json.loads does.
    """

    def __init__(self, api: str = "tgi"):
        self.api = api  # "tgi" or "openai": the events' shape
        self.first: float | None = None
        self.final: float | None = None
        self.tokens = 0
        self.usage_tokens: int | None = None
        self.failed = False  # an error event came
        self.error: object = None  # its `error` (a message, or OpenAI's {"message", ...})

    @property
    def output_tokens(self) -> int:
        """The server's count where it sent one, else the token events counted."""
        return self.usage_tokens if self.usage_tokens is not None else self.tokens

    def feed(self, line: bytes | str, now: float) -> bool:
        prefix = b"data:" if isinstance(line, bytes) else "data:"
        if not line.startswith(prefix):
            return False
        data = line[5:].strip()
        if self.api == "openai" and data in (b"[DONE]", "[DONE]"):
            return True
        event = json.loads(data)
        if "error" in event:
            self.failed, self.error = True, event["error"]
            return True
        if self.api == "openai":
            if event.get("usage"):
                self.usage_tokens = event["usage"].get("completion_tokens")
            for choice in event.get("choices") or ():
                if choice.get("text"):
                    self._token(now)
                if choice.get("finish_reason") and self.final is None:
                    self.final = now  # then the usage chunk and [DONE]
            return False
        if event.get("token") is not None:
            self._token(now)
        if event.get("generated_text") is not None:
            self.final = now
            return True
        return False

    def _token(self, now: float) -> None:
        self.tokens += 1
        if self.first is None:
            self.first = now
