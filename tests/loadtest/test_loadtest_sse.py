"""The one parser of a streamed answer's events (loadtest/sse.py), as attnserve-loadtest and the Locust user read them."""

from __future__ import annotations

import json

import pytest

from attnserve.loadtest.sse import StreamTally


def feed_all(tally: StreamTally, lines: list) -> int:
    """Feed lines at times 1, 2, ...; returns how many were read before the tally said the stream was over."""
    for i, line in enumerate(lines, 1):
        if tally.feed(line, float(i)):
            return i
    return len(lines)


@pytest.mark.parametrize("as_bytes", [True, False])  # aiohttp's lines, and Locust's decoded ones
def test_tgi_events_time_the_first_token_and_the_final_event(as_bytes):
    lines = [
        ": a comment",
        'data:{"token": {"id": 5, "text": "K"}, "generated_text": null}',
        "",
        'data:{"token": {"id": 6, "text": " AE1"}, "generated_text": null}',
        'data:{"token": {"id": 1, "text": ""}, "generated_text": "K AE1"}',
        'data:{"token": {"id": 9, "text": "never read"}, "generated_text": null}',
    ]
    tally = StreamTally()
    read = feed_all(tally, [x.encode() for x in lines] if as_bytes else lines)
    assert read == 5
    assert (tally.first, tally.final, tally.tokens, tally.output_tokens, tally.failed) == (2.0, 5.0, 3, 3, False)


def test_openai_chunks_take_the_usage_count_and_end_at_done():
    chunk = lambda text, reason=None: "data: " + json.dumps({"choices": [{"text": text, "finish_reason": reason}]})  # noqa: E731
    usage = 'data: {"choices": [], "usage": {"completion_tokens": 3}}'
    lines = [chunk("K"), chunk(" AE1"), chunk("", "stop"), usage, "data: [DONE]"]
    tally = StreamTally("openai")
    assert feed_all(tally, [x.encode() for x in lines]) == 5
    assert (tally.first, tally.final, tally.tokens, tally.output_tokens) == (1.0, 3.0, 2, 3)


@pytest.mark.parametrize("error", ["overloaded", {"message": "queue full", "type": "overloaded"}, None])
def test_an_error_event_ends_the_stream_and_is_kept(error):
    tally = StreamTally()
    assert tally.feed(b'data:{"token": {"id": 5}, "generated_text": null}', 1.0) is False
    assert tally.feed(("data:" + json.dumps({"error": error})).encode(), 2.0) is True
    assert tally.failed and tally.error == error and tally.final is None


def test_an_event_that_is_not_json_raises_as_json_loads_does():
    with pytest.raises(json.JSONDecodeError):
        StreamTally().feed(b"data:{not json", 1.0)
