"""Answers of the generation routes: the /generate body, TGI's timing headers, and the SSE stream of /generate_stream.

Also the error responses every route documents in /docs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import orjson
from fastapi.responses import Response, StreamingResponse

from service import errors
from service.engine.engine import Engine, Hypothesis, StepResult
from service.engine.scheduler import Failed
from service.http.schemas import ErrorResponse, GenerateParameters, GenerateResponse, PrefillToken
from service.metrics import ServiceMetrics

if TYPE_CHECKING:  # the request type uses this module's token helpers
    from service.text.requests import TextRequest

ERROR_RESPONSES = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        401: "Missing or wrong API key (`unauthorized`)",
        413: "Body larger than the limit (`validation`)",
        422: "Invalid input or parameters (`validation`)",
        429: "Queued + running requests at the bound (`overloaded`); see Retry-After",
        503: "Draining for shutdown (`draining`) or engine stopped (`unavailable`)",
        504: "Not finished within the request timeout (`timeout`)",
    }.items()
}
SSE_CONTENT = {"text/event-stream": {"schema": {"$ref": "#/components/schemas/StreamResponse"}}}
SSE_RESPONSE = {
    "description": "Server-Sent Events: `data:{StreamResponse}` per token; the last carries generated_text",
    "content": SSE_CONTENT,
}


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"


class LastChunk(bytes):
    """A stream's last chunk: the fast path (service/http/fastpath.py) sends it with the body's end, one write, not two."""


class CaughtUp:
    """Yielded by a request's `stream_items` when it has given every token made so far: what follows waits for
    the engine, so `sse_events` writes what it has gathered (several tokens' events in one write)."""


CAUGHT_UP = CaughtUp()

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}  # x-accel-buffering: nginx passes each event at once


def _json(obj: dict | list) -> bytes:
    """Compact JSON as bytes; orjson is several times faster than json here, where every token is an event."""
    return orjson.dumps(obj)


def token_dict(r: StepResult) -> dict:
    return {"id": r.token_id, "text": r.text, "logprob": r.logprob, "special": r.special}


def top_token_dicts(engine: Engine, top: list[tuple[int, float]] | None) -> list[dict] | None:
    """A step's most likely tokens as TGI's Token objects (each token's own text)."""
    if top is None:
        return None
    return [{"id": i, "text": engine.decode_ids([i]), "logprob": lp, "special": i in engine.special_token_ids} for i, lp in top]


def hypothesis_tokens(engine: Engine, h: Hypothesis) -> list[dict]:
    """A finished hypothesis' tokens, TGI's way: each token's text is the difference of successive
    decodes (so they concatenate to the text), the end token last with text ''."""
    out, prev = [], ""
    for k, (tok, lp) in enumerate(zip(h.token_ids, h.logprobs or [None] * len(h.token_ids))):
        text = engine.decode_ids(h.token_ids[: k + 1])
        out.append({"id": tok, "text": text[len(prev) :], "logprob": lp, "special": False})
        prev = text
    if h.finish_reason == "eos_token":
        out.append({"id": engine.eos_id, "text": "", "logprob": h.eos_logprob, "special": True})
    return out


def prefill(engine: Engine, params: GenerateParameters) -> list[PrefillToken]:
    """decoder_input_details: what the decoder was fed before the first generated token (the start token)."""
    return [PrefillToken(id=engine.bos_id, text="", logprob=None)] if params.decoder_input_details else []


def timing_headers(timings: dict[str, float], n_tokens: int) -> dict[str, str]:
    """TGI's per-response timing headers, in milliseconds, from a request's timings in seconds."""
    return {
        "x-total-time": str(round(timings["total"] * 1000)),
        "x-queue-time": str(round(timings["queue"] * 1000)),
        "x-inference-time": str(round(timings["inference"] * 1000)),
        "x-time-per-token": str(round(timings["per_token"] * 1000)),
        "x-generated-tokens": str(n_tokens),
    }


class JSONBytesResponse(Response):
    """A JSON answer already serialized: a route that returns one skips FastAPI's response_model pass (validating
    the model it was just built from again, then encoding it through jsonable_encoder and json.dumps). The
    route's response_model still documents it in /docs."""

    media_type = "application/json"


def json_response(answer: GenerateResponse | list[GenerateResponse], headers: dict[str, str]) -> JSONBytesResponse:
    if isinstance(answer, list):
        body = "[" + ",".join(a.model_dump_json() for a in answer) + "]"
    else:
        body = answer.model_dump_json()
    return JSONBytesResponse(body, headers=headers)


async def sse_events(job: TextRequest, route: str, metrics: ServiceMetrics, keepalive_s: float) -> AsyncIterator[bytes]:
    """The body of a stream: `data:{event}` per token (in text order, for running text), keep-alive
    comments while quiet, an error event on failure. The events of the tokens read at one wake-up go
    out as one chunk (one write), the stream's last as a LastChunk.

    If the client disconnects, Starlette cancels this generator at its await;
    the `finally` then cancels the request's tickets, so their rows leave the
    batch at the next step and stop generating.
    """
    outcome = "cancelled"
    index = 0
    gathered: list[bytes] = []
    try:
        async for item in job.stream_items(keepalive_s):
            if isinstance(item, CaughtUp):
                if gathered:
                    yield b"".join(gathered)
                    gathered.clear()
                continue
            if item is None:
                yield b": keep-alive\n\n"
                continue
            if isinstance(item, Failed):
                outcome = item.error.error_type
                gathered.append(b"data:" + _json(errors.error_body(item.error.error_type, item.error.message)) + b"\n\n")
                yield LastChunk(b"".join(gathered))
                return
            index += 1
            event = {"index": index, "token": item.token, "top_tokens": item.top_tokens, "generated_text": None, "details": None}
            if item.last:
                event["generated_text"] = job.generated_text()
                if job.params.details:
                    event["details"] = {
                        "finish_reason": item.finish_reason,
                        "generated_tokens": index,
                        "seed": job.seed,
                        "input_length": job.input_length,
                    }
                outcome = "success"
                metrics.request_duration.observe(time.perf_counter() - job.t_arrival)
            gathered.append(b"data:" + _json(event) + b"\n\n")
            if item.last:
                yield LastChunk(b"".join(gathered))
                gathered.clear()
    finally:
        if outcome != "success":
            job.cancel()
        metrics.request_done(route, outcome)
