"""The event loop's CPU for a stream's body alone, per request: TGI's `sse_events` (/generate_stream) and OpenAI's
one-choice body (/v1/chat/completions, usage asked for: `OneChoiceWriter` through `written`, or `stream_answer` in a
checkout without it) over a fake request that gives 8 tokens and the
end token in 4 wake-ups (what a stream gets at 64 clients), with no server, engine or socket around them.

    .venv/bin/python -m benchmarks.stream_body [--rounds 12] [--requests 3000]

Prints the best of `--rounds` rounds (thread CPU per request, us), the two bodies taking turns. Run it in two
checkouts to compare them: it imports the bodies of the checkout on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace

import uvloop

from attnserve.service.http.openai import completions, shapes

try:  # the stream's module in this checkout; an earlier one kept it in completions
    from attnserve.service.http.openai.streaming import stream_answer
except ImportError:
    stream_answer = completions.stream_answer
from attnserve.service.http.responses import sse_events

try:  # a one-choice stream's body as this checkout writes it (the app's stack iterates `written`)
    from attnserve.service.http.openai.streaming import OneChoiceWriter
    from attnserve.service.http.responses import written
except ImportError:
    OneChoiceWriter = None
from attnserve.service.requests.units import CAUGHT_UP, StreamToken, Token

TOKENS = [Token(10 + i, ("" if i == 0 else " ") + "AH0", -0.1 * i, False) for i in range(8)] + [Token(2, "", -0.01, True)]
WAKES = [2, 2, 2, 3]  # tokens per wake-up


class FakeJob:
    """What the bodies read of a TextRequest."""

    def __init__(self):
        self.params = SimpleNamespace(details=False)
        self.seed, self.input_length, self.skipped, self.t_arrival = None, 3, [], 0.0

    async def stream_items(self, keepalive_s):
        k = 0
        for w in WAKES:
            await asyncio.sleep(0)
            for _ in range(w):
                token = TOKENS[k]
                k += 1
                last = k == len(TOKENS)
                yield StreamToken(token, None, "eos_token" if last else None, last)
            yield CAUGHT_UP

    def generated_text(self) -> str:
        return "".join(t.text for t in TOKENS)

    def cancel(self) -> None:
        pass


class Metrics:
    request_duration = SimpleNamespace(observe=lambda s: None)

    def request_done(self, route, outcome):
        pass


SVC = SimpleNamespace(metrics=Metrics(), keepalive_s=10.0)
PLANNED = SimpleNamespace(n=1, stop=(), include_usage=True, logprobs=None, params={})
ENVELOPE = {"id": "chatcmpl-0", "object": "chat.completion.chunk", "created": 1, "model": "g2p-en"}
# the chat chunk's renderer, by its name in this checkout or an earlier one
RENDER = shapes.ChatChunks(PLANNED) if hasattr(shapes, "ChatChunks") else shapes.chat_chunk_renderer(PLANNED)


async def tgi() -> None:
    async for _ in sse_events(FakeJob(), "/generate_stream", Metrics(), 10.0):
        pass


async def openai() -> None:
    jobs = [[FakeJob()]]
    if OneChoiceWriter is None:
        body = stream_answer(SVC, PLANNED, jobs, "/v1/chat/completions", ENVELOPE, RENDER)
    else:
        body = written(jobs[0][0], OneChoiceWriter(SVC, PLANNED, jobs, "/v1/chat/completions", ENVELOPE, RENDER), 10.0)
    async for _ in body:
        pass


async def main(rounds: int, requests: int) -> dict[str, float]:
    best = {"/generate_stream": float("inf"), "/v1/chat/completions": float("inf")}
    for _ in range(rounds):
        for name, body in (("/generate_stream", tgi), ("/v1/chat/completions", openai)):
            t0 = time.thread_time()
            for _ in range(requests):
                await body()
            best[name] = min(best[name], (time.thread_time() - t0) / requests * 1e6)
    return best


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--requests", type=int, default=3000)
    args = p.parse_args()
    for route, us in uvloop.run(main(args.rounds, args.requests)).items():
        print(f"{route}: {us:.1f} us per request (best of {args.rounds})")
