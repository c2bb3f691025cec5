"""The /generate_stream body's token events, written from pre-encoded parts, are the bytes of the whole event dict."""

import asyncio
from types import SimpleNamespace

import orjson

from attnserve.service.http.responses import LastChunk, sse_events
from attnserve.service.requests.units import CAUGHT_UP, StreamToken, Token


class FakeJob:
    """What sse_events reads of an AdmittedRequest: its stream items and, for the last event, the answer."""

    def __init__(self, items, details: bool):
        self.items, self.output = items, SimpleNamespace(details=details)
        self.seed, self.input_length, self.skipped, self.t_arrival, self.cancelled = None, 3, [], 0.0, False

    async def stream_items(self, keepalive_s):
        for item in self.items:
            yield item

    def generated_text(self) -> str:
        return "".join(i.token["text"] for i in self.items if isinstance(i, StreamToken))

    def cancel(self) -> None:
        self.cancelled = True


class FakeMetrics:
    request_duration = SimpleNamespace(observe=lambda s: None)

    def request_done(self, route, outcome):
        self.outcome = outcome


def body(job) -> list[bytes]:
    async def run():
        return [chunk async for chunk in sse_events(job, "/generate_stream", FakeMetrics(), 10.0)]

    return asyncio.run(run())


def expected_event(index, item, job):
    def wire(t):  # TGI's Token object
        return {"id": t.id, "text": t.text, "logprob": t.logprob, "special": t.special}

    top = None if item.top_tokens is None else [wire(t) for t in item.top_tokens]
    event = {"index": index, "token": wire(item.token), "top_tokens": top, "generated_text": None, "details": None}
    if item.last:
        event["generated_text"] = job.generated_text()
        if job.output.details:
            event["details"] = {"finish_reason": item.finish_reason, "generated_tokens": index, "seed": None, "input_length": 3}
    return b"data:" + orjson.dumps(event) + b"\n\n"


def test_token_events_are_the_bytes_of_the_whole_event():
    tokens = [
        Token(7, "HH", -0.25, False),
        Token(12, ' "É\\ü', None, False),  # quotes, a backslash, non-ASCII
        Token(2, "", -1e-07, True),
    ]
    top = [[Token(7, "HH", -0.25, False)], None, None]
    for details in (False, True):
        items = [StreamToken(t, tt, "eos_token" if i == 2 else None, i == 2) for i, (t, tt) in enumerate(zip(tokens, top))]
        job = FakeJob([items[0], CAUGHT_UP, items[1], items[2]], details)
        chunks = body(job)
        assert chunks == [expected_event(1, items[0], job), expected_event(2, items[1], job) + expected_event(3, items[2], job)]
        assert isinstance(chunks[-1], LastChunk) and not job.cancelled


def test_openai_chunk_events_are_the_bytes_of_the_whole_chunk():
    """A /v1 stream's token chunk is the envelope's pre-encoded head and tail around its one choice."""
    from attnserve.service.http.openai.streaming import _event, chunk_event_parts

    envelope = {"id": "chatcmpl-1a2b", "object": "chat.completion.chunk", "created": 1795000000, "model": 'g2p "en" [x]'}
    choices = [
        {"index": 0, "delta": {"role": "assistant", "content": "HH"}, "logprobs": None, "finish_reason": None},
        {
            "index": 3,
            "delta": {"content": ' "É\\ü'},
            "logprobs": {"content": [{"token": "AH0", "logprob": -0.5}]},
            "finish_reason": None,
        },
        {"index": 1, "text": "", "logprobs": None, "finish_reason": "stop"},
    ]
    head, tail = chunk_event_parts(envelope)
    for choice in choices:
        assert head + orjson.dumps(choice) + tail == _event({**envelope, "choices": [choice]})
