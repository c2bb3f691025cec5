"""Answers of the generation routes: the /generate body, TGI's timing headers, and the SSE stream of /generate_stream.

Also the error responses every route documents in /docs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import numpy as np
import orjson
from fastapi.responses import Response, StreamingResponse
from starlette.requests import Request

from attnserve.service.engine.engine import Engine
from attnserve.service.engine.scheduler import Failed
from attnserve.service.http import errors
from attnserve.service.http.schemas import (
    TASK_KEYS,
    BestOfSequence,
    Details,
    ErrorResponse,
    GenerateResponse,
    PrefillToken,
    SentenceDetails,
    TextWarning,
    Token,
    WordAlternative,
    WordCandidate,
    WordDetails,
)
from attnserve.service.metrics import ServiceMetrics
from attnserve.service.requests import units as text_units
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.units import Answer, CaughtUp, StreamToken
from attnserve.service.text.sentences import sentence_spans

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
    """A stream's last chunk: sent with the body's end, one write, not two (service/http/generation.py)."""


SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}  # x-accel-buffering: nginx passes each event at once


def _json(obj: dict | list) -> bytes:
    """Compact JSON as bytes; orjson is several times faster than json here, where every token is an event."""
    return orjson.dumps(obj)


def token_object(t: text_units.Token) -> dict:
    """A token as TGI's Token object, for orjson (which writes a dict several times faster than a dataclass)."""
    return {"id": t.id, "text": t.text, "logprob": t.logprob, "special": t.special}


def wire_tokens(tokens: list[text_units.Token]) -> list[Token]:
    """The request layer's tokens as TGI's Token objects."""
    return [Token(id=t.id, text=t.text, logprob=t.logprob, special=t.special) for t in tokens]


def wire_steps(steps: list[list[text_units.Token] | None] | None) -> list[list[Token] | None] | None:
    """Each step's alternatives (`top_n_tokens`) as TGI's Token objects."""
    return None if steps is None else [None if step is None else wire_tokens(step) for step in steps]


async def client_gone(request: Request) -> None:
    """Returns when the client of an ASGI request disconnects (its body has been read, so the next message is the
    disconnect): what the request layer's `AdmittedRequest.collect` waits on beside the engine."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def disconnect_watch(request: Request) -> asyncio.Future:
    """`client_gone` of this request, running: the future the request layer's `AdmittedRequest.collect` waits on."""
    return asyncio.ensure_future(client_gone(request))


def prefill(engine: Engine, decoder_input_details: bool) -> list[PrefillToken]:
    """decoder_input_details: what the decoder was fed before the first generated token (the start token)."""
    return [PrefillToken(id=engine.bos_id, text="", logprob=None)] if decoder_input_details else []


def generate_response(job: AdmittedRequest) -> GenerateResponse:
    """The /generate body of a request whose units have all finished (`AdmittedRequest.collect`).

    With details: a single unit's tokens, score and source, and its other answers as best_of_sequences;
    running text's tokens are all the words' (`AdmittedRequest.separated`), `finish_reason` is the last word's,
    `score` the mean log-probability of all the tokens (null when a lexicon word has none), `source` is
    `lexicon` only when every word's is, and `details.words` describes each word, with its alternatives
    under best_of (running text of several words has no `best_of_sequences`)."""
    text = job.generated_text()
    params = job.output
    if not params.details:
        return GenerateResponse(generated_text=text)
    if params.words_only:
        return words_response(job, text)
    answered = [job.answers(u) for u in job.units]
    bests = [answers[0] for answers, _ in answered]
    full = job.inputs if params.return_full_text else ""
    fed = prefill(job.engine, params.decoder_input_details)
    if len(job.units) == 1:
        answers, top = answered[0]
        tokens, score, source = bests[0].tokens, bests[0].score, answer_source(bests)
        others = [
            BestOfSequence(
                generated_text=full + a.text,
                finish_reason=a.finish_reason,
                generated_tokens=a.generated_tokens,
                seed=a.seed,
                prefill=fed,
                tokens=wire_tokens(a.tokens),
                score=a.score,
                source=a.source,
                index=a.index,
            )
            for a in answers[1:]
        ]
    else:
        tokens = [job.separated(t, k, j) for k, b in enumerate(bests) for j, t in enumerate(b.tokens)]
        tops = [top for _, top in answered]
        top = None
        if all(t is not None for t in tops):  # each step's alternatives carry the separator its token carries
            top = [[job.separated(alt, k, j) for alt in step] for k, t in enumerate(tops) for j, step in enumerate(t)]
        logprobs = [t.logprob for t in tokens]
        score = float(np.mean(logprobs)) if logprobs and None not in logprobs else None
        source = answer_source(bests)
        others = None
    details = Details(
        finish_reason=finish_reason(bests),
        generated_tokens=sum(b.generated_tokens for b in bests),
        seed=job.seed,
        prefill=fed,
        tokens=wire_tokens(tokens),
        top_tokens=wire_steps(top),
        best_of_sequences=others if job.options.n_best > 1 and others is not None else None,
        score=score,
        source=source,
        words=word_details(job, [answers for answers, _ in answered]) if job.reader is not None else None,
        warnings=warnings(job),
    )
    return GenerateResponse(generated_text=text, details=details)


def words_response(job: AdmittedRequest, text: str) -> GenerateResponse:
    """The /generate body with `details: "words"`: the words with their spans, answers and sources, and the answer's
    summary (finish reason, tokens generated, seed, score, source), without the per-token list."""
    answered = [job.answers(u)[0] for u in job.units]
    bests = [answers[0] for answers in answered]
    logprobs = [t.logprob for b in bests for t in b.tokens]
    details = Details(
        finish_reason=finish_reason(bests),
        generated_tokens=sum(b.generated_tokens for b in bests),
        seed=job.seed,
        prefill=prefill(job.engine, job.output.decoder_input_details),
        tokens=None,
        score=float(np.mean(logprobs)) if logprobs and None not in logprobs else None,
        source=answer_source(bests),
        words=word_details(job, answered) if job.reader is not None else None,
        warnings=warnings(job),
        sentences=sentence_details(job) if job.output.sentences and job.reader is not None else None,
    )
    return GenerateResponse(generated_text=text, details=details)


def sentence_details(job: AdmittedRequest) -> list[SentenceDetails]:
    """Running text's sentences (service/text/sentences.py): each one's span, its answer (its words' answers joined as
    the whole answer joins them) and the range of its words; a word outside every sentence (a mark alone) is in none."""
    texts = [job.best_text(u) for u in job.units]
    out, k = [], 0
    for start, end in sentence_spans(job.inputs)[0]:
        while k < len(job.units) and job.units[k].word.start < start:
            k += 1
        first = k
        while k < len(job.units) and job.units[k].word.start < end:
            k += 1
        if job.written is not None:  # espeak: a space before each word, none before a mark
            text = "".join(job.written.joints[i] + texts[i] for i in range(first, k)).lstrip()
        else:
            text = job.reader.join(texts[first:k])
        out.append(SentenceDetails(sentence=job.inputs[start:end], start=start, end=end, text=text, word_start=first, word_end=k))
    return out


def finish_reason(bests: list[Answer]) -> str:
    """Running text's `finish_reason`: its last word's; a text of no words (punctuation alone) ends at once."""
    return bests[-1].finish_reason if bests else "eos_token"


def answer_source(bests: list[Answer]) -> str:
    """`details.source`: one word's own; running text's `lexicon` only when every word's answer came from the lexicon
    (or a kept mark, or the context stage's choice among the lexicon's)."""
    if len(bests) == 1 and bests[0].source != "punctuation":
        return bests[0].source
    return "lexicon" if all(b.source in ("lexicon", "punctuation", "context") for b in bests) else "model"


def word_details(job: AdmittedRequest, answered: list[list[Answer]]) -> list[WordDetails]:
    """Each word of running text: its span, its best answer, and its other answers under best_of."""
    out = []
    for u, answers in zip(job.units, answered):
        best = answers[0]
        out.append(
            WordDetails(
                word=u.word.text,
                start=u.word.start,
                end=u.word.end,
                text=best.text,
                source=best.source,
                score=best.score,
                guessed=best.guessed,
                candidates=[WordCandidate(text=t, score=p) for t, p in best.candidates] if best.candidates is not None else None,
                finish_reason=best.finish_reason,
                alternatives=[WordAlternative(text=a.text, source=a.source, score=a.score) for a in answers[1:]]
                if job.options.n_best > 1
                else None,
            )
        )
    return out


def warnings(job: AdmittedRequest) -> list[TextWarning] | None:
    """The characters of running text that were skipped; null when none were (or the bundle reads inputs whole), so
    an answer with nothing skipped is unchanged."""
    if not job.skipped:
        return None
    return [TextWarning(start=s.start, end=s.end, text=s.text, message=s.message) for s in job.skipped]


def word_span(job: AdmittedRequest, k: int) -> dict:
    """Unit k's index and span in `inputs`, as a stream event that completes it carries them (`details: "words"`)."""
    w = job.units[k].word
    return {"index": k, "start": w.start, "end": w.end} if w is not None else {"index": k, "start": 0, "end": len(job.inputs)}


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
    if isinstance(answer, list):  # `/`: a task key only where the bundle's task has one (CompatResponse)
        body = (
            "["
            + ",".join(a.model_dump_json(exclude={k for k in TASK_KEYS.values() if getattr(a, k, 0) is None}) for a in answer)
            + "]"
        )
    else:
        body = answer.model_dump_json()
    return JSONBytesResponse(body, headers=headers)


# a stream's token event ends alike for every token but the last (which carries generated_text and details)
_EVENT_END = b',"generated_text":null,"details":null}\n\n'


class SSEWriter:
    """A stream's body from its items (service/requests/streaming.py): `data:{event}` per token, the tokens of one
    wake-up as one chunk (one write), a keep-alive comment for a None, the stream's last chunk (its last token's
    event, or the error event of a Failed) as a LastChunk; then `ended`. `close` ends the request's accounting:
    the request counted with its outcome and, unless it succeeded, its tickets cancelled (their rows leave the
    batch at the next step)."""

    def __init__(self, job: AdmittedRequest, route: str, metrics: ServiceMetrics):
        self.job, self.route, self.metrics = job, route, metrics
        self.ended = self.closed = False
        self.outcome = "cancelled"
        self._index = 0
        self._gathered: list[bytes] = []

    def add(self, items) -> list[bytes]:
        """The chunks that `items` make, in order; nothing after the last."""
        chunks: list[bytes] = []
        gathered = self._gathered
        for item in items:
            if self.ended:
                break
            if isinstance(item, CaughtUp):
                if gathered:
                    chunks.append(b"".join(gathered))
                    gathered.clear()
            elif item is None:
                chunks.append(b": keep-alive\n\n")
            elif isinstance(item, Failed):
                self.outcome = item.error.error_type
                gathered.append(b"data:" + _json(errors.error_body(item.error.error_type, item.error.message)) + b"\n\n")
                self._end(chunks)
            else:
                self._index += 1
                if not item.last:  # the common event, from pre-encoded parts: the bytes orjson gives the whole dict
                    top = b"null" if item.top_tokens is None else _json([token_object(t) for t in item.top_tokens])
                    token = _json(token_object(item.token))
                    word = b"" if item.word is None else self._word(item)  # most tokens complete no word
                    event = (self._index, token, top, word, _EVENT_END)
                    gathered.append(b'data:{"index":%d,"token":%b,"top_tokens":%b%b%b' % event)
                else:
                    gathered.append(b"data:" + _json(self._last_event(item)) + b"\n\n")
                    self.outcome = "success"
                    self.metrics.request_duration.observe(time.perf_counter() - self.job.t_arrival)
                    self._end(chunks)
        return chunks

    def _end(self, chunks: list[bytes]) -> None:
        chunks.append(LastChunk(b"".join(self._gathered)))
        self._gathered.clear()
        self.ended = True

    def _word(self, item: StreamToken) -> bytes:
        """`,"word":{...}`: the span of the word an event completes, with `details: "words"`; b"" otherwise."""
        if not self.job.output.words_only:
            return b""
        return b',"word":' + _json(word_span(self.job, item.word))

    def _last_event(self, item: StreamToken) -> dict:
        job = self.job
        top_tokens = None if item.top_tokens is None else [token_object(t) for t in item.top_tokens]
        event = {
            "index": self._index,
            "token": token_object(item.token),
            "top_tokens": top_tokens,
            **({"word": word_span(job, item.word)} if item.word is not None and job.output.words_only else {}),
            "generated_text": job.generated_text(),
            "details": None,
        }
        if job.output.details:
            event["details"] = {
                "finish_reason": item.finish_reason,
                "generated_tokens": self._index,
                "seed": job.seed,
                "input_length": job.input_length,
            }
            if job.skipped:
                event["details"]["warnings"] = [w.model_dump() for w in warnings(job)]
        return event

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.outcome != "success":
            self.job.cancel()
        self.metrics.request_done(self.route, self.outcome)


async def sse_events(job: AdmittedRequest, route: str, metrics: ServiceMetrics, keepalive_s: float) -> AsyncIterator[bytes]:
    """The body of a /generate_stream answer (`SSEWriter`) from the request's `stream_items`."""
    async for chunk in written(job, SSEWriter(job, route, metrics), keepalive_s):
        yield chunk


async def written(job: AdmittedRequest, writer, keepalive_s: float) -> AsyncIterator[bytes]:
    """What `writer` (`SSEWriter`, or /v1's `OneChoiceWriter`) makes of the request's `stream_items`, chunk by chunk.

    If the client disconnects, Starlette cancels this generator at its await;
    the `finally` then cancels the request's tickets, so their rows leave the
    batch at the next step and stop generating.
    """
    try:
        async with contextlib.aclosing(job.stream_items(keepalive_s)) as items:
            async for item in items:
                for chunk in writer.add((item,)):
                    yield chunk
                if writer.ended:
                    return
    finally:
        writer.close()


class WrittenResponse(SSEResponse):
    """A stream whose body `writer` makes from one request's items: the app's stack iterates its body (`written`);
    the generation routes push it from the engine's wake-ups instead (service/http/generation.py)."""

    def __init__(self, job: AdmittedRequest, writer, keepalive_s: float, headers: dict[str, str]):
        super().__init__(written(job, writer, keepalive_s), headers=headers)
        self.job, self.writer = job, writer
