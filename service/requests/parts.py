"""A word of running text read in parts (service/text/parts.py), seen by the rest of the request layer as one unit
with one ticket (`PartsTicket`), so it stays one word of the answer: one `|`-separated field of generated_text, one
`details.words` entry, its tokens in one run of the stream.

Two cases:
- a word longer than the model reads (`max_input_tokens`) is read in parts from the start: the lexicon answers the
  parts it knows (when it may answer the request), the model the others;
- a word whose model reading ends implausibly early for its length (`attnserve.service.text.parts.stopped_early`) is read
  again in parts once that reading has ended, where the lexicon answers the request (a greedy or beam request, the
  bundle has a lexicon, the request does not ask for the model's own answers with `lexicon: false`, `top_n_tokens`
  or `decoder_input_details`); the parts' answer is kept when it is longer, and a warning names the word either way.

Other requests get the model's own reading of a word it can read: a sample is the model's answer, and `lexicon:
false` asks for it (the served model's parity with its reference holds there). They still read an over-long word in
parts, with the request's options (and seed): each part a sample of the model's distribution when sampled.

A word read in parts has one answer (the parts' best answers joined: no best_of alternatives, no top tokens), with
source `parts`. A checked word's tokens come in the stream at once, when its reading (and its parts') has ended.
`max_new_tokens` and stop sequences apply to each part the model reads, as to each word: the default bound (32
tokens) would otherwise cut the very words read in parts. /score refuses an over-long word (the model scores one
input it can read). What a word's parts read depends on the word alone, so its answer does not depend on the text
around it or on other requests (the engine's answers are batch-invariant).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Container

from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.scheduler import Failed, Finished, Scheduler, Ticket
from attnserve.service.engine.step import StepResult
from attnserve.service.engine.stopping import Hypothesis
from attnserve.service.errors import ServiceError
from attnserve.service.requests.units import Answer, Unit, hypothesis_tokens
from attnserve.service.text.compounds import compound_parts, compound_reading
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.text.parts import MIN_CHECKED_LETTERS, InParts, letters, split_word, stopped_early

# a part is the lexicon's answer (its token ids) or the engine's ticket
Part = tuple[int, ...] | Ticket


class PartsTicket:
    """A word's parts as one ticket: its events come all at once, when every part has ended (a `StepResult` per token
    of the joined answer, then `Finished`), or a part's `Failed`. `whole`: the ticket of the word's own reading, checked
    when it ends (`retry` then gives the parts); else `parts` are the word's parts from the start."""

    def __init__(
        self,
        engine: Engine,
        word: str,
        *,
        whole: Ticket | None = None,
        parts: list[Part] | None = None,
        retry: Callable[[PartsTicket], list[Part] | None] | None = None,
        parts_phones: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        ready: asyncio.Event | None = None,
    ):
        self.engine = engine
        self.word = word
        self.whole = whole
        self.parts = parts
        self.retry = retry
        self.parts_phones = parts_phones  # the phonemes of the word's dictionary parts, where it splits wholly into them
        self.loop = loop
        # an owner reading answers whole shares its `ready`; a stream's owner waits on this ticket's own
        self.event = ready if ready is not None else (asyncio.Event() if loop is not None else None)
        self.on_ready: Callable[[], None] | None = None  # a pushed stream (http/generation.py) instead of `event`
        self.warnings: list | None = None  # the request's warnings (`AdmittedRequest.skipped`): a retry adds one
        self.span = (0, 0, word)  # the word's span in the request's text, for the warning
        self.generation: _Joined | None = None
        self.source = "parts"  # "model" when the whole reading was kept
        self.done = False
        self._ended: dict[int, Hypothesis] = {}  # id(ticket) -> its best hypothesis, once it finished
        self._failed: Failed | None = None
        self._given = False
        self._pending: list[Ticket] = []  # the tickets not yet ended
        self._beams: list[Hypothesis] = []  # the whole reading's hypotheses, best first
        for t in self.tickets:
            self.watch(t)

    @property
    def tickets(self) -> list[Ticket]:
        parts = [p for p in self.parts or () if isinstance(p, Ticket)]
        return ([self.whole] if self.whole is not None else []) + parts

    def watch(self, t: Ticket) -> None:
        """Have a part's ticket wake this ticket's owner."""
        t.on_ready = self._part_ready
        self._pending.append(t)

    def _part_ready(self) -> None:
        if self.on_ready is not None:
            self.on_ready()
        elif self.event is not None:
            self.event.set()

    # ---- the Ticket interface the request layer reads ------------------------------------------------------------
    @property
    def counted(self) -> bool:
        return any(t.counted for t in self.tickets)

    @property
    def n_tokens(self) -> int:
        return self.generation.generated_tokens if self.generation is not None else 0

    @property
    def t_admitted(self) -> float | None:
        times = [t.t_admitted for t in self.tickets if t.t_admitted is not None]
        return min(times) if times else None

    @property
    def t_last_token(self) -> float | None:
        times = [t.t_last_token for t in self.tickets if t.t_last_token is not None]
        return max(times) if len(times) == len(self.tickets) else None

    def timings(self) -> dict[str, float]:
        now = time.perf_counter()
        arrival = min(t.t_arrival for t in self.tickets) if self.tickets else now
        admitted, last = self.t_admitted or now, self.t_last_token or now
        inference = max(0.0, last - admitted)
        n = self.n_tokens
        per_token = inference / n if n else 0.0
        return {"total": now - arrival, "queue": admitted - arrival, "inference": inference, "per_token": per_token}

    @property
    def cancelled(self) -> bool:
        return any(t.cancelled for t in self.tickets)

    def cancel(self) -> None:
        for t in self.tickets:
            t.cancel()

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()

    def take_events(self) -> list:
        """The word's events when it has ended (once), else []."""
        for t in list(self._pending):
            if self._failed is None:
                self._take(t, t.take_events())
        return self._events()

    async def wait_events(self) -> list:
        self.event.clear()
        events = self.take_events()
        if not events:
            await self.event.wait()
            events = self.take_events()
        return events

    def next_events_blocking(self, timeout: float | None = None) -> list:
        while True:
            events = self.take_events()
            if events or self._given:
                return events
            if not self._pending:
                continue
            t = self._pending[0]
            got = t.next_events_blocking(timeout)
            if not got:
                return []
            self._take(t, got)

    # ---- reading the parts ---------------------------------------------------------------------------------------
    def _take(self, t: Ticket, events: list) -> None:
        for ev in events:
            if isinstance(ev, Failed):
                self._failed = ev
                self.cancel()
                return
            if isinstance(ev, Finished):
                self._ended[id(t)] = t.generation.hypotheses[0]
                if t is self.whole:  # its other beams are the word's other answers if its reading is kept
                    self._beams = list(t.generation.hypotheses)
                self._pending.remove(t)
                return

    def _events(self) -> list:
        if self._given:
            return []
        if self._failed is not None:
            self._given = self.done = True
            return [self._failed]
        whole = self._ended.get(id(self.whole)) if self.whole is not None else None
        if self.whole is not None and whole is None:
            return []
        if self.parts is None:  # the word's own reading has ended: kept, or read again in parts
            if not stopped_early(self.word, len(whole.token_ids), self.parts_phones) or self.retry is None:
                return self._give(whole, "model")
            parts = self.retry(self)
            if parts is None:  # no room in the queue for the parts now: the model's own reading stands
                return self._give(whole, "model")
            self.parts = parts
            for t in self.tickets[1:]:
                self.watch(t)
            return self.take_events() if self.tickets[1:] else self._events_of_parts(whole)
        return [] if self._pending else self._events_of_parts(whole)

    def _events_of_parts(self, whole: Hypothesis | None) -> list:
        readings = []
        for p in self.parts:
            if isinstance(p, Ticket):
                h = self._ended.get(id(p))
                if h is None:
                    return []
                readings.append(h)
            else:
                readings.append(Hypothesis(list(p), [], "eos_token"))
        joined = _join(self.engine, readings)
        if whole is not None:  # a retry: the parts' answer only when it reads more of the word
            start, end, text = self.span
            kept = len(joined.token_ids) > len(whole.token_ids)
            if self.warnings is not None:
                how = "the parts' reading is kept" if kept else "the model's own reading is kept, the parts' being no longer"
                parts = f" (its dictionary parts read {self.parts_phones})" if self.parts_phones is not None else ""
                reason = (
                    f"the model's reading ended after {len(whole.token_ids)} phonemes for {len(self.word)} letters{parts}; {how}"
                )
                self.warnings.append(InParts(start, end, text, reason))
            if not kept:
                return self._give(whole, "model")
        return self._give(joined, "parts")

    def _give(self, h: Hypothesis, source: str) -> list:
        self.generation = _Joined([h, *self._beams[1:]] if source == "model" else [h])
        self.source = source
        self._given = self.done = True
        out: list = []
        tokens = hypothesis_tokens(self.engine, h)
        for k, tok in enumerate(tokens):
            last = k == len(tokens) - 1
            out.append(StepResult(self.generation, tok.id, tok.text, tok.logprob, h.finish_reason if last else None, tok.special))
        out.append(Finished(h.finish_reason))
        return out


class _Joined:
    """What the request layer reads of a finished ticket's `generation`, for a word read in parts."""

    streams = False

    def __init__(self, hypotheses: list[Hypothesis]):
        h = hypotheses[0]
        self.hypotheses = hypotheses
        self.text = h.text
        self.token_ids = h.token_ids
        self.generated_tokens = h.generated_tokens


def _join(engine: Engine, readings: list[Hypothesis]) -> Hypothesis:
    """The parts' readings as one: their tokens in order, the log-probabilities when every part has them (the parts'
    end tokens but the last left out), finished as the last part finished unless an earlier one did not end."""
    ids = [i for h in readings for i in h.token_ids]
    scored = all(h.logprobs for h in readings)
    logprobs = [lp for h in readings for lp in h.logprobs] if scored else []
    cut = next((h.finish_reason for h in readings if h.finish_reason != "eos_token"), "eos_token")
    eos = readings[-1].eos_logprob if scored and cut == "eos_token" else None
    return Hypothesis(ids, logprobs, cut, eos, text=engine.decode_ids(ids))


class PartsPlan:
    """How a text's words reach the model when some are read in parts (`queue`): the front end's lexicon and encoder."""

    def __init__(
        self,
        scheduler: Scheduler,
        engine: Engine,
        encode: Callable[[str], list[int]],
        known: Callable[[str], tuple[int, ...] | None] | None,
        lexicon: Container[str] | None,
        max_part: int,
    ):
        self.scheduler, self.engine, self.encode = scheduler, engine, encode
        self.known = known  # a part's lexicon answer; None: the lexicon does not answer this request
        self.lexicon = lexicon  # where a word splits cleanly
        self.max_part = max_part

    def queue(
        self,
        inputs: str,
        units: list[Unit],
        options: DecodingOptions,
        loop: asyncio.AbstractEventLoop | None,
        ready: asyncio.Event | None,
    ) -> list[PartsTicket]:
        """Queue the units the model answers, in one `submit_many` (all or none, in the text's chunks): a word with
        `parts` as its parts (the lexicon answering the parts it knows; a word it knows in every part answered so,
        not queued), a long word of a greedy or beam request as itself, then in parts if its reading ends early.
        Returns the words' PartsTickets (their warnings go to the request's)."""
        requests: list[tuple[list[int], DecodingOptions]] = []
        plans: list[tuple[Unit, list[tuple[int, ...] | None]]] = []  # a word's parts: the lexicon's ids or None
        for u in units:
            if u.parts is None:
                requests.append((u.source_ids, options))
                continue
            found = [self.known(p) if self.known is not None else None for p in u.parts]
            if all(f is not None for f in found):
                u.known = [answer_of(found, self.engine)]
                continue
            plans.append((u, found))
            requests += [(self.encode(p), options) for p, f in zip(u.parts, found) if f is None]
        if not requests:
            return []
        tickets = self.scheduler.submit_many(requests, loop, ready, chunk=self.scheduler.text_chunk)
        out, k = [], 0
        # a word's reading is checked where the lexicon answers the request (greedy and beam requests that do not ask
        # for the model's own answers): a sample, `lexicon: false` and a bundle without a lexicon get the model's own
        checked = self.known is not None
        parted = dict((id(u), found) for u, found in plans)
        for u in units:  # the tickets in the order of `requests`
            if u.parts is None:
                u.ticket, k = tickets[k], k + 1
                if checked and u.word is not None and not u.known and letters(u.text) >= MIN_CHECKED_LETTERS:
                    retry, phones = self._retry(u, options), self._parts_phones(u.text)
                    u.ticket = self._ticket(u, inputs, loop, ready, whole=u.ticket, retry=retry, parts_phones=phones)
                    out.append(u.ticket)
            elif id(u) in parted:
                parts: list[Part] = []
                for f in parted[id(u)]:
                    if f is None:
                        f, k = tickets[k], k + 1
                    parts.append(f)
                u.ticket = self._ticket(u, inputs, loop, ready, parts=parts)
                out.append(u.ticket)
        return out

    def _ticket(self, u: Unit, inputs: str, loop, ready, **kw) -> PartsTicket:
        pt = PartsTicket(self.engine, u.text, loop=loop, ready=ready, **kw)
        pt.span = (u.word.start, u.word.end, inputs[u.word.start : u.word.end])
        return pt

    def _parts_phones(self, word: str) -> int | None:
        """The phonemes of `word`'s parts together, when it splits wholly into two or more the lexicon answers."""
        parts = split_word(word, self.lexicon, self.max_part)
        found = [self.known(p) for p in parts] if len(parts) >= 2 else [None]
        return None if any(f is None for f in found) else sum(len(f) for f in found)

    def _retry(self, u: Unit, options: DecodingOptions) -> Callable[[PartsTicket], list[Part] | None]:
        def retry(pt: PartsTicket) -> list[Part] | None:
            parts = split_word(u.text, self.lexicon, self.max_part)
            if len(parts) < 2:
                return None
            try:
                return submit_parts(self.scheduler, parts, self.encode, self.known, options, pt.loop, pt.event)
            except ServiceError:  # no room in the queue now
                return None

        return retry


def submit_parts(
    scheduler: Scheduler,
    parts: list[str],
    encode: Callable[[str], list[int]],
    lookup: Callable[[str], tuple[int, ...] | None] | None,
    options: DecodingOptions,
    loop: asyncio.AbstractEventLoop | None,
    ready: asyncio.Event | None,
) -> list[Part]:
    """Each part's answer: the lexicon's (`lookup`), else the engine's ticket (queued together)."""
    out: list[Part | None] = [lookup(p) if lookup is not None else None for p in parts]
    asked = [k for k, found in enumerate(out) if found is None]
    if asked:
        tickets = scheduler.submit_many([(encode(parts[k]), options) for k in asked], loop, ready)
        for k, t in zip(asked, tickets):
            out[k] = t
    return out


def answer_of(known: list[tuple[int, ...]], engine: Engine) -> Answer:
    """A word whose every part the lexicon knows: its joined answer (no engine call)."""
    h = _join(engine, [Hypothesis(list(ids), [], "eos_token") for ids in known])
    return Answer(h.text, hypothesis_tokens(engine, h), h.finish_reason, h.generated_tokens, None, "parts")


def compound_ids(written: str, word: str, lexicon: Lexicon, ids: Callable[[str], tuple[int, ...]]) -> tuple[int, ...] | None:
    """The target ids of a word the lexicon lacks read from its dictionary parts (service/text/compounds.py), one
    word's answer with source `parts`; None when it is not read so. `written`: the word as the text wrote it (its case
    marks the parts); `ids`: a reading's target ids."""
    parts = compound_parts(written, word, lexicon)
    if parts is None:
        return None

    def first(part: str) -> str | None:
        found = lexicon.lookup(part)
        return found[0].text if found else None

    reading = compound_reading(parts, first)
    return ids(reading) if reading is not None else None
