"""A generation request as units, each answered by the lexicon or by the engine: the whole input, or each word of running text.

Every generation route goes through here, so the routes stay thin and /generate and
/generate_stream answer alike:

    job = TextRequest.admit(svc, body, stream)  # validate, read, look up, queue the model's units (all at once)
    await job.collect(request)                  # /generate: every unit finished (False: the client went away)
    job.response()                              # its GenerateResponse
    job.stream_items(keepalive_s)               # /generate_stream: tokens in text order, as they come

Units. A word-level bundle (`bundle.json` `word_level_source`) reads running text word by
word (service/text/reader.py): each word is a unit. Any other bundle reads its input whole: one unit.

Who answers a unit. The lexicon (service/text/lexicon.py) answers greedy requests, beam search
(best_of without sampling) included, unless the request says `"lexicon": false`. Sampled
requests, `top_n_tokens` and `decoder_input_details` always go to the model: they ask for the
model's own distribution. With best_of N, the lexicon's answers come first, in dictionary
order, and the model's beams fill the rest (a beam equal to a lexicon answer is skipped); a
unit the lexicon answers fully never reaches the engine. The units the model answers are
queued together (`Scheduler.submit_many`), so they share decoder steps; each counts toward
`max_concurrent_requests`.

A lexicon answer is a real token sequence: the target tokenizer's ids with logprob null, then
the end token (finish reason `eos_token`); its score is null. `max_new_tokens` applies to each
unit, so a longer lexicon answer is cut (finish reason `length`), as the model's would be, and a
stop sequence ends it after the first token that completes it (finish reason `stop_sequence`).

Running text's answer: `generated_text` is the words' best answers joined by the word
separator (`" | "`); `details.tokens` are all the words' tokens, end tokens included, with
the separator put in front of the text of each word's first token, so the token texts
concatenate to `generated_text`, in the details as in the stream; `finish_reason` is the last
word's; `score` is the mean log-probability of all the tokens (null when a lexicon word has
none); `source` is `lexicon` only when every word's is; `details.words` describes each word,
with its alternatives under best_of (running text of several words has no
`best_of_sequences`). A single unit answers exactly as a request did before lexicons and
running text, plus `details.words` for a word-level bundle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
from fastapi import Request

from service import errors
from service.engine.decoding import Hypothesis, StoppingCriteria, request_seed
from service.engine.engine import DecodingOptions, Engine, StepResult
from service.engine.scheduler import Failed, Finished, Ticket
from service.http.responses import CAUGHT_UP, CaughtUp, hypothesis_tokens, prefill, token_dict, top_token_dicts
from service.http.schemas import (
    BestOfSequence,
    Details,
    GenerateParameters,
    GenerateRequest,
    GenerateResponse,
    Token,
    WordAlternative,
    WordDetails,
)
from service.text.lexicon import Lexicon
from service.text.reader import TextError, TextReader, Word


@dataclass
class Answer:
    """One answer of a unit: its text, its tokens as TGI's Token dicts (the end token last when it
    ended), and where it came from."""

    text: str
    tokens: list[dict]
    finish_reason: str
    generated_tokens: int
    score: float | None
    source: str  # "model" or "lexicon"
    index: int | None = None  # which sampled candidate it was (best_of with sampling)
    seed: int | None = None

    @property
    def token_ids(self) -> list[int]:
        return [t["id"] for t in self.tokens if not t["special"]]


@dataclass(eq=False)
class Unit:
    """What one answer is asked for: a word of running text, or the whole input."""

    text: str  # what is looked up and encoded: the word as read, or the input
    word: Word | None  # word-level bundles: the word, its span in the request's `inputs`
    source_ids: list[int]
    known: list[Answer]  # the lexicon's answers, best first (at most n_best); [] when it does not answer
    ticket: Ticket | None = None  # the engine's, when the model answers (or fills best_of)
    results: list[StepResult] = field(default_factory=list)
    finished: Finished | None = None


@dataclass(frozen=True)
class StreamToken:
    """One token of a stream, in text order; `last`: the text's last token."""

    token: dict
    top_tokens: list[dict] | None
    finish_reason: str | None
    last: bool


def lexicon_answers(params: GenerateParameters, options: DecodingOptions) -> bool:
    """Whether the lexicon may answer this request (see the module's docstring)."""
    return params.lexicon is not False and not options.sampling and not options.top_n_tokens and not params.decoder_input_details


def lexicon_answer(engine: Engine, ids: tuple[int, ...], max_new_tokens: int, stop: tuple[str, ...] = ()) -> Answer:
    """A lexicon entry as an answer: its target ids with logprob null and the end token, cut at max_new_tokens,
    or after the first stop sequence it completes, token by token as the model's answer would be
    (the shared StoppingCriteria: the stop sequence is kept, the finish reason is `stop_sequence`)."""
    cut = len(ids) > max_new_tokens
    h = Hypothesis(list(ids[:max_new_tokens]), [], "length" if cut else "eos_token")
    if stop:
        stopping, old = StoppingCriteria(max_new_tokens, tuple(stop)), ""
        for k in range(1, len(h.token_ids) + 1):
            new = engine.decode_ids(h.token_ids[:k])
            if stopping(k, old, new) == (True, "stop_sequence"):
                h.token_ids, h.finish_reason = h.token_ids[:k], "stop_sequence"
                break
            old = new
    h.text = engine.decode_ids(h.token_ids)
    return Answer(h.text, hypothesis_tokens(engine, h), h.finish_reason, h.generated_tokens, None, "lexicon")


class TextRequest:
    """One generation request: its units, the lexicon's answers, the engine's tickets. Build with `admit`."""

    def __init__(
        self,
        engine: Engine,
        reader: TextReader | None,
        body: GenerateRequest,
        params: GenerateParameters,
        options: DecodingOptions,
        units: list[Unit],
        t_arrival: float,
        ready: asyncio.Event | None = None,
    ):
        self.engine = engine
        self.reader = reader
        self.inputs = body.inputs
        self.params = params
        self.options = options
        self.units = units
        self.t_arrival = t_arrival
        self.ready = ready  # what the tickets set when one ends (admitted for /generate: `collect`)

    # ---- admission ------------------------------------------------------------------------------
    @classmethod
    def admit(cls, svc, body: GenerateRequest, stream: bool) -> TextRequest:
        """Validate `body`, read its words (word-level bundles), answer what the lexicon knows and queue the
        rest on the engine, all at once. `svc`: the Service (engine, validator, reader, lexicon, scheduler).
        Raises APIError 422 (what to fix), 429 or 503."""
        t_arrival = time.perf_counter()
        engine: Engine = svc.engine
        params = body.parameters or GenerateParameters()
        svc.validator.check_supported(params)
        if svc.reader is None:  # the model reads the input whole
            ids = svc.validator.source_ids(body.inputs, params.truncate)
            text = body.inputs if params.truncate is None else svc.validator.keep_last_tokens(body.inputs, params.truncate)
            units = [Unit(text, None, ids, [])]
        else:
            units = [Unit(w.text, w, list(w.source_ids), []) for w in read_words(svc, body.inputs, params.truncate)]
        options = svc.validator.options(params, stream)
        if options.sampling and options.seed is None:
            # one seed for every word, picked here (the engine's rule) and reported back: the same request reproduces
            options = dataclasses.replace(options, seed=request_seed(options))
        lexicon: Lexicon | None = svc.lexicon
        if lexicon is not None and lexicon_answers(params, options):
            for u in units:
                found = lexicon.lookup(u.text)[: options.n_best]
                u.known = [lexicon_answer(engine, a.ids, options.max_new_tokens, options.stop) for a in found]
        to_model = [u for u in units if len(u.known) < options.n_best]
        if len(to_model) > svc.scheduler.max_concurrent_requests:
            raise errors.validation(
                f"inputs: {len(to_model)} words need the model, and this server runs at most "
                f"{svc.scheduler.max_concurrent_requests} at once (max_concurrent_requests); send fewer words per request"
            )
        ready = None if stream else asyncio.Event()  # /generate reads its answer whole: woken once per ending ticket
        if to_model:
            tickets = svc.scheduler.submit_many([(u.source_ids, options) for u in to_model], svc.loop, ready)
            for u, t in zip(to_model, tickets):
                u.ticket = t
        return cls(engine, svc.reader, body, params, options, units, t_arrival, ready)

    def cancel(self) -> None:
        """Drop every unit's rows from the batch (the client went away, or another unit failed)."""
        for u in self.units:
            if u.ticket is not None:
                u.ticket.cancel()

    # ---- what the answer says -------------------------------------------------------------------
    @property
    def seed(self) -> int | None:
        """The seed a sampled request used (every word's); None otherwise."""
        return self.options.seed if self.options.sampling else None

    @property
    def input_length(self) -> int:
        return sum(len(u.source_ids) for u in self.units)

    def best_text(self, u: Unit) -> str:
        return u.known[0].text if u.known else u.ticket.generation.text

    def generated_text(self) -> str:
        """The answer's text: the best answer of each unit, joined by the word separator (running text)."""
        texts = [self.best_text(u) for u in self.units]
        text = self.reader.join(texts) if self.reader is not None else texts[0]
        return self.inputs + text if self.params.return_full_text else text

    def answers(self, u: Unit) -> tuple[list[Answer], list[list[dict]] | None]:
        """A finished unit's answers, best first (the lexicon's, then the model's beams that differ from
        them, n_best in all), and the model's top tokens per step when asked for."""
        if u.ticket is None:
            return u.known, None
        gen = u.ticket.generation
        best = gen.hypotheses[0]
        top = None
        if gen.streams:  # one row, decided token by token: the step results are its tokens
            tokens = [token_dict(r) for r in u.results]
            if self.options.top_n_tokens:
                top = [top_token_dicts(self.engine, r.top_tokens) for r in u.results]
        else:
            tokens = hypothesis_tokens(self.engine, best)
        scored = bool(best.logprobs) or best.eos_logprob is not None
        model = [
            Answer(gen.text, tokens, u.finished.finish_reason, best.generated_tokens, best.score if scored else None, "model")
        ]
        sampled = self.options.sampling  # a sampled candidate says which it was; beams do not
        model += [
            Answer(
                h.text,
                hypothesis_tokens(self.engine, h),
                h.finish_reason,
                h.generated_tokens,
                h.score,
                "model",
                h.index if sampled else None,
                h.seed,
            )
            for h in gen.hypotheses[1:]
        ]
        if not u.known:
            return model, top
        taken = [a.token_ids for a in u.known]
        return (u.known + [a for a in model if a.token_ids not in taken])[: self.options.n_best], None

    def response(self) -> GenerateResponse:
        """The /generate body once every unit has finished (`collect`)."""
        text = self.generated_text()
        if not self.params.details:
            return GenerateResponse(generated_text=text)
        answered = [self.answers(u) for u in self.units]
        bests = [answers[0] for answers, _ in answered]
        full = self.inputs if self.params.return_full_text else ""
        if len(self.units) == 1:
            answers, top = answered[0]
            tokens, score, source = bests[0].tokens, bests[0].score, bests[0].source
            others = [
                BestOfSequence(
                    generated_text=full + a.text,
                    finish_reason=a.finish_reason,
                    generated_tokens=a.generated_tokens,
                    seed=a.seed,
                    prefill=prefill(self.engine, self.params),
                    tokens=[Token(**t) for t in a.tokens],
                    score=a.score,
                    source=a.source,
                    index=a.index,
                )
                for a in answers[1:]
            ]
        else:
            tokens = [self.separated(t, k, j) for k, b in enumerate(bests) for j, t in enumerate(b.tokens)]
            tops = [top for _, top in answered]
            top = [step for t in tops for step in t] if all(t is not None for t in tops) else None
            logprobs = [t["logprob"] for t in tokens]
            score = float(np.mean(logprobs)) if logprobs and None not in logprobs else None
            source = "lexicon" if all(b.source == "lexicon" for b in bests) else "model"
            others = None
        details = Details(
            finish_reason=bests[-1].finish_reason,
            generated_tokens=sum(b.generated_tokens for b in bests),
            seed=self.seed,
            prefill=prefill(self.engine, self.params),
            tokens=[Token(**t) for t in tokens],
            top_tokens=top,
            best_of_sequences=others if self.options.n_best > 1 and others is not None else None,
            score=score,
            source=source,
            words=self.word_details(answered) if self.reader is not None else None,
        )
        return GenerateResponse(generated_text=text, details=details)

    def word_details(self, answered: list[tuple[list[Answer], object]]) -> list[WordDetails]:
        out = []
        for u, (answers, _) in zip(self.units, answered):
            best = answers[0]
            out.append(
                WordDetails(
                    word=u.word.text,
                    start=u.word.start,
                    end=u.word.end,
                    text=best.text,
                    source=best.source,
                    score=best.score,
                    finish_reason=best.finish_reason,
                    alternatives=[WordAlternative(text=a.text, source=a.source, score=a.score) for a in answers[1:]]
                    if self.options.n_best > 1
                    else None,
                )
            )
        return out

    def separated(self, token: dict, unit: int, position: int) -> dict:
        """A token of running text: the first token of every word after the first carries the separator
        in front of its text, so the tokens' texts concatenate to generated_text."""
        if unit == 0 or position != 0 or self.reader is None:
            return token
        return {**token, "text": self.reader.separator + token["text"]}

    def n_tokens(self) -> int:
        """Tokens of the answer (x-generated-tokens)."""
        return sum(u.known[0].generated_tokens if u.known else u.ticket.n_tokens for u in self.units)

    def timings(self) -> dict[str, float]:
        """Seconds: total, queue, inference, per token, over all of the request's tickets (TGI's x-* headers)."""
        tickets = [u.ticket for u in self.units if u.ticket is not None]
        if len(tickets) == 1 and len(self.units) == 1:
            return tickets[0].timings()
        now = time.perf_counter()
        if not tickets:  # the lexicon answered everything
            return {"total": now - self.t_arrival, "queue": 0.0, "inference": 0.0, "per_token": 0.0}
        admitted = min(t.t_admitted or now for t in tickets)
        inference = max(0.0, max(t.t_last_token or now for t in tickets) - admitted)
        n = sum(t.n_tokens for t in tickets)
        return {
            "total": now - self.t_arrival,
            "queue": max(0.0, admitted - self.t_arrival),
            "inference": inference,
            "per_token": inference / n if n else 0.0,
        }

    # ---- waiting for the engine -------------------------------------------------------------------
    async def collect(self, request: Request) -> bool:
        """Wait until every unit the model answers has finished: True; False when the client went away
        first (its rows are then cancelled). Raises the APIError of a unit that failed (timeout,
        shutdown), the other units cancelled."""
        waiting = [u for u in self.units if u.ticket is not None]
        if not waiting:
            return True
        # one task (the disconnect watch) and one event per request, not a task per word: each is event-loop CPU
        ready = self.ready
        gone = asyncio.ensure_future(_client_gone(request))
        gone.add_done_callback(lambda _: ready.set())
        ok = False
        try:
            while True:
                ready.clear()
                waiting = [u for u in waiting if not _take(u)]  # raises a failed unit's APIError
                if not waiting:
                    ok = True
                    return True
                if gone.done():
                    return False
                await ready.wait()
        finally:
            gone.cancel()
            if not ok:
                self.cancel()  # the client went away, or a unit failed: the others' rows leave the batch

    async def stream_items(self, keepalive_s: float) -> AsyncIterator[StreamToken | Failed | CaughtUp | None]:
        """The answer's tokens in text order as the engine makes them: StreamToken per token (a lexicon
        word's at once), CAUGHT_UP after the tokens of each wake-up, None after `keepalive_s` without one,
        or a Failed that ends the stream."""
        # one timer per stream, re-armed only when it fires, not a timeout per token: it wakes the ticket
        # being read, which then answers a keep-alive if nothing was yielded for keepalive_s
        loop = asyncio.get_running_loop()
        last_yield = loop.time()
        reading: Ticket | None = None

        def check_quiet() -> None:
            nonlocal timer
            quiet_until = last_yield + keepalive_s
            if loop.time() >= quiet_until and reading is not None:
                reading.wake()
                quiet_until = loop.time() + keepalive_s
            timer = loop.call_at(quiet_until, check_quiet)

        timer = loop.call_at(last_yield + keepalive_s, check_quiet)
        try:
            for k, u in enumerate(self.units):
                last_unit = k == len(self.units) - 1
                if u.ticket is None:
                    tokens = u.known[0].tokens
                    for j, t in enumerate(tokens):
                        end = j == len(tokens) - 1
                        reason = u.known[0].finish_reason if end else None
                        yield StreamToken(self.separated(t, k, j), None, reason, last_unit and end)
                    last_yield = loop.time()
                    yield CAUGHT_UP
                    continue
                reading, position = u.ticket, 0
                while u.finished is None:
                    events = await u.ticket.wait_events()
                    if not events:  # woken by the timer (or late by a step whose events were taken already)
                        if loop.time() - last_yield >= keepalive_s:
                            last_yield = loop.time()
                            yield None
                        continue
                    for ev in events:
                        if isinstance(ev, Failed):
                            yield ev
                            return
                        if isinstance(ev, Finished):
                            u.finished = ev
                            break
                        u.results.append(ev)
                        top = top_token_dicts(self.engine, ev.top_tokens)
                        token = self.separated(token_dict(ev), k, position)
                        position += 1
                        yield StreamToken(token, top, ev.finish_reason, last_unit and ev.finish_reason is not None)
                    last_yield = loop.time()
                    yield CAUGHT_UP
        finally:
            timer.cancel()
            # check_quiet's closure holds itself and the timer (which holds check_quiet): cut both, so the stream's
            # state is freed now rather than by the cyclic collector
            timer = check_quiet = None


def read_words(svc, text: str, truncate: int | None) -> list[Word]:
    """The words of a request's running text, spans into `text`; APIError 422 naming what cannot be read.
    TGI's `truncate` keeps the text's last `truncate` source tokens before it is read."""
    if not text.strip():
        raise errors.validation("inputs: input text is empty")
    offset = 0
    if truncate is not None:
        kept = svc.validator.keep_last_tokens(text, truncate)
        offset, text = len(text) - len(kept), kept
    try:
        words = svc.reader.words(text)
    except TextError as e:
        raise errors.validation(f"inputs: {e}") from None
    return [Word(w.text, w.start + offset, w.end + offset, w.source_ids) for w in words]


def _take(u: Unit) -> bool:
    """Take a unit's step results so far: whether it has finished; raises its APIError if it failed."""
    for ev in u.ticket.take_events():
        if isinstance(ev, Failed):
            raise ev.error
        if isinstance(ev, Finished):
            u.finished = ev
            return True
        u.results.append(ev)
    return u.finished is not None


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (the body has been read, so the next message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
