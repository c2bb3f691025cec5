"""Scoring requests: an input and the answers to score, from text to the engine's ids and back to tokens.

POST /score and the in-process `Generator.score` (and `attnserve-generate --score`) both come here, so they
give the same numbers by construction:

    job = admit_scores(front, "attention", ["AH0 T EH1 N SH AH0 N", "AE1 T EH1 N SH AH0 N"], loop=loop)
    scored = await job.finished()    # an event loop's owner (job.wait() from a thread)
    scored[0].total, scored[0].score, scored[0].tokens

The input is read as generation reads it (`RequestLayer.units`): a word-level bundle reads running text
word by word, and a request scores the answers of ONE word (its text as read: case folded, a number
spelt out). The lexicon is never consulted: the scores are the model's. A target is written in the
model's output symbols (for G2P, ARPAbet with stress, space-separated) and read by the bundle's target
tokenizer; a symbol it does not know is refused by name. The engine scores each target with teacher
forcing (service/engine/scoring.py): every token's raw log-probability, the end token last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from attnserve.service.engine.engine import Engine
from attnserve.service.engine.scheduler import Failed, Finished, ScoreTicket
from attnserve.service.engine.scoring import TargetScore
from attnserve.service.engine.stopping import Hypothesis
from attnserve.service.errors import InvalidRequest
from attnserve.service.requests.frontend import RequestLayer
from attnserve.service.requests.units import Token, hypothesis_tokens, top_tokens


@dataclass
class ScoredTarget:
    """One target's scores, as every front end answers them."""

    target: str  # as given
    total: float  # its log-probability: the sum over its tokens, the end token included
    score: float  # the n-best ranking rule: the mean log-probability of its tokens, the end token included
    tokens: list[Token]  # the end token last
    top_tokens: list[list[Token]] | None = None  # per token: the top_n_tokens most likely at that position


def target_ids(engine: Engine, targets: Sequence[str | Sequence[int]]) -> list[list[int]]:
    """Each target's ids: under the bundle's target tokenizer for a text, as given for a list of token ids (the ids
    a generation's `details.tokens` reported, so an answer scores exactly as it was generated even where the
    tokenizer would split its text otherwise). InvalidRequest (field `targets`) for no target, an empty one, a
    symbol the model does not write (named), an id outside its vocabulary or a special one, or one longer than the
    model's answers can be."""
    if not targets:
        raise InvalidRequest("give at least one target to score", field="targets")
    out = []
    longest = engine.max_target_len - 1  # the end token takes the last position
    for k, text in enumerate(targets):
        if isinstance(text, list | tuple):
            out.append(given_ids(engine, k, text, longest))
            continue
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest(f"target {k} is empty", field="targets")
        enc = engine.tgt_tokenizer.encode(text, add_special_tokens=False)
        unknown = [text[a:b] for tok, (a, b) in zip(enc.ids, enc.offsets) if tok in engine.special_token_ids]
        if unknown:
            shown = ", ".join(repr(s) for s in dict.fromkeys(unknown))
            raise InvalidRequest(
                f"target {k} ({text!r}) holds {shown}, not among the symbols this model writes; "
                "write it as the model's answers are written",
                field="targets",
            )
        if not enc.ids:
            raise InvalidRequest(f"target {k} ({text!r}) has no symbol this model writes", field="targets")
        if len(enc.ids) > longest:
            raise InvalidRequest(
                f"target {k} is {len(enc.ids)} tokens long; this model's answers are at most {longest} tokens "
                "(and the end token)",
                field="targets",
            )
        out.append(list(enc.ids))
    return out


def given_ids(engine: Engine, k: int, ids: Sequence[int], longest: int) -> list[int]:
    """Target k given as token ids, checked: each a non-special id of the target vocabulary, at most `longest`."""
    if not ids:
        raise InvalidRequest(f"target {k} is empty", field="targets")
    bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < engine.vocab_size]
    if bad:
        raise InvalidRequest(
            f"target {k} holds {bad[0]!r}, not a token id of this model (0 to {engine.vocab_size - 1})", field="targets"
        )
    special = [i for i in ids if i in engine.special_token_ids]
    if special:
        raise InvalidRequest(
            f"target {k} holds the special token id {special[0]} (the end token is scored after the ids given)",
            field="targets",
        )
    if len(ids) > longest:
        raise InvalidRequest(
            f"target {k} is {len(ids)} tokens long; this model's answers are at most {longest} tokens (and the end token)",
            field="targets",
        )
    return list(ids)


def admit_scores(
    front: RequestLayer,
    inputs: str,
    targets: Sequence[str | Sequence[int]],
    *,
    top_n_tokens: int = 0,
    loop: asyncio.AbstractEventLoop | None = None,
) -> ScoreRequest:
    """Read the input and the targets and queue them on the engine (a row per target). `loop`: an asyncio owner's
    event loop (None: a thread waits with `wait`). Raises InvalidRequest (what to fix), or the scheduler's
    Overloaded / Unavailable."""
    units = front.units(inputs, None)
    if len(units) != 1:
        raise InvalidRequest(
            f"this model reads one word at a time, and scoring takes one word; this text has {len(units)} words",
            field="inputs",
        )
    if units[0].parts is not None:  # generation reads it in parts; a score is the model's of one input it reads
        n, limit = len(units[0].source_ids), front.max_input_tokens
        raise InvalidRequest(
            f"word {units[0].text!r} is {n} tokens long; this model scores inputs of at most {limit}: score its parts",
            field="inputs",
        )
    ids = target_ids(front.engine, targets)
    ticket = front.scheduler.submit_scores(units[0].source_ids, ids, loop, top_n_tokens)
    texts = [t if isinstance(t, str) else front.engine.decode_ids(list(t)) for t in targets]  # ids: their text
    return ScoreRequest(front.engine, units[0].text, texts, ticket)


class ScoreRequest:
    """A queued scoring request; its owner waits (`finished` or `wait`) and reads `results`."""

    def __init__(self, engine: Engine, word: str, targets: list[str], ticket: ScoreTicket):
        self.engine = engine
        self.word = word  # the input as read
        self.targets = targets
        self.ticket = ticket

    @property
    def input_length(self) -> int:
        return len(self.ticket.source_ids)

    def cancel(self) -> None:
        self.ticket.cancel()

    async def finished(self) -> list[ScoredTarget]:
        """Wait on the event loop; the scores, or the ServiceError the request ended with. Leaving early (the
        awaiting task cancelled) takes its rows out of the batch."""
        try:
            while True:
                for ev in await self.ticket.wait_events():
                    if isinstance(ev, Failed | Finished):
                        return self._end(ev)
        finally:
            if not self.ticket.done:
                self.ticket.cancel()

    def wait(self) -> list[ScoredTarget]:
        """Block this thread until the scores are in; raises the ServiceError the request ended with."""
        while True:
            for ev in self.ticket.next_events_blocking():
                if isinstance(ev, Failed | Finished):
                    return self._end(ev)

    def _end(self, ev: Failed | Finished) -> list[ScoredTarget]:
        if isinstance(ev, Failed):
            raise ev.error
        return [scored(self.engine, text, s) for text, s in zip(self.targets, self.ticket.scores)]


def scored(engine: Engine, text: str, s: TargetScore) -> ScoredTarget:
    """An engine TargetScore as the front ends answer it: each token's text is the difference of successive decodes
    (generation's rule, so the texts concatenate to the decoded target), the end token last with text ''."""
    ids = s.token_ids[:-1]
    h = Hypothesis(ids, s.logprobs[:-1], "eos_token", s.logprobs[-1])
    top = None
    if s.top_tokens is not None:
        top = [top_tokens(engine, t, ids[:k]) for k, t in enumerate(s.top_tokens)]
    return ScoredTarget(text, s.total, s.score, hypothesis_tokens(engine, h), top)
