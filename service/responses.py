"""Answers of the generation routes: the /generate body, TGI's timing headers, and the SSE stream of /generate_stream.

Also the error responses every route documents in /docs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson
from fastapi.responses import Response, StreamingResponse

from service import errors
from service.engine import Engine, Hypothesis, StepResult
from service.metrics import ServiceMetrics
from service.scheduler import Failed, Finished, Ticket
from service.schemas import (
    BestOfSequence,
    Details,
    ErrorResponse,
    GenerateParameters,
    GenerateResponse,
    PrefillToken,
    Token,
)

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


def timing_headers(ticket: Ticket, n_tokens: int) -> dict[str, str]:
    """TGI's per-response timing headers, in milliseconds."""
    t = ticket.timings()
    return {
        "x-total-time": str(round(t["total"] * 1000)),
        "x-queue-time": str(round(t["queue"] * 1000)),
        "x-inference-time": str(round(t["inference"] * 1000)),
        "x-time-per-token": str(round(t["per_token"] * 1000)),
        "x-generated-tokens": str(n_tokens),
    }


def generate_response(
    engine: Engine, ticket: Ticket, results: list[StepResult], finished: Finished, params: GenerateParameters, inputs: str
) -> GenerateResponse:
    """The /generate body of a finished ticket: its text (after the input with return_full_text), details on request."""
    gen = ticket.generation
    text = gen.text if gen is not None else ""
    if params.return_full_text:
        text = inputs + text
    details = None
    if params.details and gen is not None:
        best = gen.hypotheses[0]
        if gen.streams:  # one row, decided token by token: the step results are its tokens
            tokens = [Token(**token_dict(r)) for r in results]
            top = [top_token_dicts(engine, r.top_tokens) for r in results] if gen.options.top_n_tokens else None
        else:
            tokens = [Token(**t) for t in hypothesis_tokens(engine, best)]
            top = None
        others = [
            BestOfSequence(
                generated_text=(inputs if params.return_full_text else "") + h.text,
                finish_reason=h.finish_reason,
                generated_tokens=h.generated_tokens,
                seed=h.seed,
                prefill=prefill(engine, params),
                tokens=[Token(**t) for t in hypothesis_tokens(engine, h)],
                score=h.score,
                index=h.index if gen.options.sampling else None,
            )
            for h in gen.hypotheses[1:]
        ]
        details = Details(
            finish_reason=finished.finish_reason,
            generated_tokens=best.generated_tokens,
            seed=ticket.seed,
            prefill=prefill(engine, params),
            tokens=tokens,
            top_tokens=top,
            best_of_sequences=others if gen.options.n_best > 1 else None,
            score=best.score if best.logprobs or best.eos_logprob is not None else None,
        )
    return GenerateResponse(generated_text=text, details=details)


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


async def sse_events(
    engine: Engine,
    ticket: Ticket,
    params: GenerateParameters,
    inputs: str,
    route: str,
    metrics: ServiceMetrics,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    """The body of a stream: `data:{event}` per token, keep-alive comments while quiet, an error event on failure.

    If the client disconnects, Starlette cancels this generator at its await;
    the `finally` then cancels the ticket, so the row leaves the batch at the
    next step and stops generating.
    """
    outcome = "cancelled"
    index = 0
    try:
        while True:
            try:
                async with asyncio.timeout(keepalive_s):  # a timer, not a task per wait as asyncio.wait_for makes
                    events = await ticket.next_events()
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            chunks, last = [], False  # the events that arrived together go out in one write
            for ev in events:
                if isinstance(ev, Finished):
                    last = True
                    break
                if isinstance(ev, Failed):
                    outcome = ev.error.error_type
                    chunks.append(b"data:" + _json(errors.error_body(ev.error.error_type, ev.error.message)) + b"\n\n")
                    last = True
                    break
                index += 1
                top = top_token_dicts(engine, ev.top_tokens)
                event = {"index": index, "token": token_dict(ev), "top_tokens": top, "generated_text": None, "details": None}
                if ev.finish_reason is not None:
                    text = ticket.generation.text
                    event["generated_text"] = inputs + text if params.return_full_text else text
                    if params.details:
                        event["details"] = {
                            "finish_reason": ev.finish_reason,
                            "generated_tokens": index,
                            "seed": ticket.seed,
                            "input_length": len(ticket.source_ids),
                        }
                    outcome = "success"
                    metrics.request_duration.observe(time.perf_counter() - ticket.t_arrival)
                chunks.append(b"data:" + _json(event) + b"\n\n")
            if chunks:
                yield b"".join(chunks)
            if last:
                return
    finally:
        if outcome == "cancelled":
            ticket.cancel()
        metrics.request_done(route, outcome)
