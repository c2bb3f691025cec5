"""A per-search beam search, the reference that the engine's vectorised step (service/engine/beam.py) must equal
(tests/engine/test_beam_vectorised.py, tests/engine/test_decoding.py): the same candidates, hypotheses, scores and
tie-breaking. Each search scans its candidates in Python and keeps each
beam's ids in a list; every row keeps its beam's place, so a beam whose parent is another row takes that row's
cache (`place_beams`)."""

# A whole second search, its state the same as the vectorised one's: pylint's duplicate check is off here.
# pylint: disable=duplicate-code

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnserve.service.engine.stopping import Hypothesis, StoppingCriteria, rank


@dataclass
class Beam:
    """A live beam: what its row has generated so far."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # raw
    score: float = 0.0  # cumulative processed log-probability: what the search ranks live beams by
    text: str = ""


class BeamSearch:
    """Beam search of width W over the W rows a request owns (Whisper's BeamSearchDecoder, patience 1).

    Each step: every (beam, token) candidate scores beam.score + processed log-prob; scanning
    candidates best first, one that ends (end token, or a stop sequence) becomes a finished
    hypothesis while fewer than W are finished; the first W that go on become the next beams.
    The search ends when W hypotheses are finished or the length limit is reached (live beams
    then finish with reason "length"); `finalize` ranks them by the mean raw log-probability.
    """

    def __init__(self, width: int, n_best: int, eos_id: int, stopping: StoppingCriteria, decode=None):
        self.width = width
        self.n_best = n_best
        self.eos_id = eos_id
        self.stopping = stopping
        self.decode = decode  # ids -> text, needed only for stop sequences
        # The W rows start identical: only the first may extend at step 0, so no hypothesis repeats.
        self.beams = [Beam(score=0.0 if j == 0 else -np.inf) for j in range(width)]
        self.finished: list[Hypothesis] = []
        self.done = False

    def _advance(self, candidates: list[int], scores: list[float], raw: list[float], v: int) -> tuple[list[int], list[int]]:
        """The step's candidates, best first (flat beam * V + token, their scores and raw log-probs): the
        hypotheses that end, the W beams that go on. Returns this search's (parents, tokens), see update_searches."""
        w = self.width
        parents, tokens, nxt = [], [], []
        for idx, score, lp in zip(candidates, scores, raw):
            if not math.isfinite(score):
                break
            parent, token = divmod(idx, v)
            beam = self.beams[parent]
            if token == self.eos_id:
                if len(self.finished) < self.width:
                    self.finished.append(Hypothesis(list(beam.token_ids), list(beam.logprobs), "eos_token", eos_logprob=lp))
                continue
            ids = [*beam.token_ids, token]
            text = self.decode(ids) if self.stopping.stop else ""
            stop, reason = self.stopping(len(ids), beam.text, text)
            if stop and reason == "stop_sequence":
                if len(self.finished) < self.width:
                    self.finished.append(Hypothesis(ids, [*beam.logprobs, lp], reason, text=text))
                continue
            parents.append(parent)
            tokens.append(token)
            nxt.append(Beam(ids, [*beam.logprobs, lp], score, text))
            if len(nxt) == w:
                break
        at_limit = bool(nxt) and len(nxt[0].token_ids) >= self.stopping.max_new_tokens
        if len(self.finished) >= self.width or not nxt or at_limit:
            if at_limit:
                for beam in nxt:  # the limit: live beams finish as they are
                    self.finished.append(Hypothesis(beam.token_ids, beam.logprobs, "length", text=beam.text))
            self.done = True
        while len(nxt) < w:  # fewer live candidates than rows (a tiny vocabulary): pad with a dead beam
            parents.append(parents[0] if parents else 0)
            tokens.append(tokens[0] if tokens else self.eos_id)
            nxt.append(Beam(score=-np.inf))
        self.beams = nxt
        return parents, tokens

    def finalize(self) -> list[Hypothesis]:
        """The n_best hypotheses, best first; live beams count as finished by length if none ended."""
        hyps = self.finished or [Hypothesis(b.token_ids, b.logprobs, "length", text=b.text) for b in self.beams if b.token_ids]
        ranked = rank(hyps)[: self.n_best]
        for i, h in enumerate(ranked):
            h.index = i
        return ranked


def update_searches(
    searches: Sequence[BeamSearch], processed_logprobs: np.ndarray, raw_logprobs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step of n beam searches of one width W, over their rows' log-probabilities ([n, W, V] each): the
    candidates of every search are chosen in one numpy pass (CTranslate2's batched beam search), then each
    search takes its own. Returns (parents, tokens) [n, W]: row j of search i continues from row parents[i, j]
    with tokens[i, j] (the caller reorders the rows' caches). Sets a search's `done` when it has ended (its
    rows then need no further step).

    Every candidate scores beam.score + processed log-prob; each search keeps its 2W + 1 best, ordered by
    score, ties towards the lower (beam, token). Each row of the pass is its search's alone (argpartition
    and the sorts work row by row), so a search chooses the same whatever searches share its step."""
    n, w, v = processed_logprobs.shape
    beam_scores = np.array([[b.score for b in s.beams] for s in searches], dtype=np.float64)
    scores = (beam_scores[:, :, None] + processed_logprobs).reshape(n, w * v)
    k = min(2 * w + 1, w * v)
    each = np.arange(n)[:, None]  # row indexing of [n, k] choices (take_along_axis costs more per call)
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    top = top[each, np.lexsort((top, -scores[each, top]), axis=1)]  # by score, ties towards the lower (beam, token)
    top_scores = scores[each, top].tolist()
    top_raw = raw_logprobs.reshape(n, w * v)[each, top].tolist()
    chosen = [s._advance(c, sc, r, v) for s, c, sc, r in zip(searches, top.tolist(), top_scores, top_raw)]
    return np.array([p for p, _ in chosen], dtype=np.int64), np.array([t for _, t in chosen], dtype=np.int64)


def place_beams(slots: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Beam j stays in row slots[i, j]; it takes its parent's cache when its parent was another row."""
    src = slots[np.arange(len(slots))[:, None], parents]
    moves = src != slots
    return slots.copy(), slots[moves], src[moves]
