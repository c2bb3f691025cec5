"""Teacher forcing: the log-probabilities the served model gives answers it is handed (POST /score, `Generator.score`).

A scoring row feeds its target's tokens instead of choosing them. It joins a batch of the engine's served
variant like a generation's row (`engine.start`, then `batch.add`), and each step runs the same decoder call
through the same batch contract (service/engine/contract.py: `batch.run`), whatever the cache kind. The step
at position k reads the log-probability of target token k from the step's logits, and the row then feeds
that token, not a chosen one, through the contract's teacher-forcing call, `batch.feed`:

    position 0: feed the start token  -> log p(t1)
    position 1: feed t1               -> log p(t2)
    ...
    position n: feed tn               -> log p(end token)   and the row leaves

So a target of n tokens takes n + 1 steps, and its total includes the end token. Each log-probability
is the model's raw one (log-softmax of the step's logits, before any processor), computed as generation
computes the `logprob` of a token it chose: scoring greedy generation's own answer gives back the
log-probabilities of its `details.tokens`. A row's arithmetic does not depend on the other rows of its
batch (the promise generation keeps: bitwise in a v2 batch, within float32 rounding in a v1 fp32 one), so a
target's scores are the same alone or among other requests'.

`ForcedBatch` holds the rows; the scheduler (service/engine/scheduler.py) steps it on the engine thread
beside the generation batch, and its `ScoreTicket` is a scoring request as the scheduler sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from attnserve.service.engine.engine import Engine
from attnserve.service.engine.options import DecodingOptions
from attnserve.service.engine.processors import log_softmax, top_tokens
from attnserve.service.engine.rows import Generation, Row


@dataclass
class TargetScore:
    """One target's scores: its tokens (the end token last) with their raw log-probabilities, aligned."""

    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    top_tokens: list[list[tuple[int, float]]] | None = None  # per position: the n most likely (id, raw logprob)

    @property
    def total(self) -> float:
        """The sequence's log-probability: the sum over its tokens, the end token included."""
        return float(sum(self.logprobs))

    @property
    def score(self) -> float:
        """The n-best ranking rule (decoding.Hypothesis.score): the mean raw log-probability, end token included."""
        return float(np.mean(self.logprobs)) if self.logprobs else 0.0


class ScoreJob(Protocol):
    """What ForcedBatch scores: one source, its targets' ids (without the end token), how many top tokens to report
    per position, and where the scores go (one slot per target, filled as each target finishes)."""

    source_ids: list[int]
    targets: list[list[int]]
    top_n_tokens: int
    scores: list[TargetScore | None]


# A forced row's generation record: no token is chosen, no text decoded, nothing sampled, and its length limit is
# never read (a forced row leaves when its target ends; service/requests/scoring.py checks target lengths).
FORCED_OPTIONS = DecodingOptions(max_new_tokens=1, token_text=False)


@dataclass(eq=False)
class _Forced:
    """A row being scored: whose it is, which of its targets, and how far it has got."""

    job: ScoreJob
    index: int  # which target of the job
    tokens: list[int]  # the target's ids, the end token last
    generation: Generation
    score: TargetScore
    done: int = 0  # tokens scored so far


class ForcedBatch:
    """Rows that feed given tokens, in a batch of the engine's served variant (its `new_batch`)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.batch = engine.new_batch()
        self.rows: dict[Row, _Forced] = {}  # every row in the batch -> what it scores
        self.left: dict[ScoreJob, int] = {}  # each job in the batch -> its targets not yet scored

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def jobs(self) -> list[ScoreJob]:
        return list(self.left)

    def add(self, jobs: list[ScoreJob]) -> None:
        """Join these jobs, a row per target: ONE encoder call for all their rows (a job's source once per
        target: the encoder is batch-invariant, so each row's cross-attention state is the source's alone).
        Raises the engine's InputError (nothing joined) for a source it refuses."""
        items = [(t.source_ids, FORCED_OPTIONS) for t in jobs for _ in t.targets]
        joined, sources = self.engine.start(items)
        gens = iter(joined)
        eos = self.engine.eos_id
        for t in jobs:
            self.left[t] = len(t.targets)
            for k, target in enumerate(t.targets):
                gen = next(gens)
                score = TargetScore([*target, eos], top_tokens=[] if t.top_n_tokens else None)
                self.rows[gen.rows[0]] = _Forced(t, k, score.token_ids, gen, score)
        self.batch.add(joined, sources)

    def remove(self, jobs: list[ScoreJob]) -> None:
        """Drop the rows these jobs still have in the batch (cancelled, or past their deadline)."""
        going = set(jobs)
        leaving = [f for f in self.rows.values() if f.job in going]
        self.batch.remove([f.generation for f in leaving])
        for f in leaving:
            del self.rows[f.generation.rows[0]]
        for t in jobs:
            self.left.pop(t, None)

    def step(self) -> list[ScoreJob]:
        """ONE decoder call for every row; each row records its next target token's log-probability and feeds that
        token. Returns the jobs whose every target is now scored (their rows have left the batch)."""
        logits, _ = self.batch.run()
        raw = log_softmax(logits)  # [B, V] float64, over every row at once as a generation step computes it
        rows = self.batch.rows
        tokens = np.full(len(rows), self.engine.eos_id, dtype=np.int64)  # free slots feed anything valid
        leaving: list[Row] = []
        finished: list[ScoreJob] = []
        for i, row in enumerate(rows):
            if row is None:
                continue
            f = self.rows[row]
            tok = f.tokens[f.done]
            f.score.logprobs.append(float(raw[i, tok]))
            if f.score.top_tokens is not None:
                f.score.top_tokens.append(top_tokens(raw[i], f.job.top_n_tokens))
            f.done += 1
            tokens[i] = tok
            if f.done == len(f.tokens):
                leaving.append(row)
                del self.rows[row]
                t = f.job
                t.scores[f.index] = f.score
                self.left[t] -= 1
                if not self.left[t]:
                    del self.left[t]
                    finished.append(t)
        self.batch.state.advance(tokens)
        self.batch.feed(tokens, leaving)
        return finished
