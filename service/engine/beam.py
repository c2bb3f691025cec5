"""Beam search: a request that owns W rows.

`update_searches` turns a step's log-probs into each search's W surviving beams (parents and tokens), all the
searches of one width at once; `place_beams` says which batch row each new beam takes, so the caller copies
the KV cache of as few rows as it can (`reorder` of the batch classes); `BeamSearch.finalize` ranks the
hypotheses. Beam search accumulates the processed log-probabilities, so penalties steer the search; without
processors they are the model's own. Hypotheses are ranked by the mean raw log-probability
(service/engine/stopping.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from attnserve.service.engine.stopping import Hypothesis, StoppingCriteria, rank


class BeamSearch:
    """Beam search of width W over the W rows a request owns (Whisper's BeamSearchDecoder, patience 1).

    Each step: every (beam, token) candidate scores beam score + processed log-prob; scanning
    candidates best first, one that ends (end token, or a stop sequence) becomes a finished
    hypothesis while fewer than W are finished; the first W that go on become the next beams.
    The search ends when W hypotheses are finished or the length limit is reached (live beams
    then finish with reason "length"); `finalize` ranks them by the mean raw log-probability.

    The live beams are kept as back-pointers, CTranslate2's way: per step, each beam's parent, token and raw
    log-probability (`history`), so a step appends three lists and a beam's ids are read back only when it
    becomes a hypothesis. Beam j is the search's j-th row (Generation.rows[j]).
    """

    def __init__(self, width: int, n_best: int, eos_id: int, stopping: StoppingCriteria, decode=None):
        self.width = width
        self.n_best = n_best
        self.eos_id = eos_id
        self.stopping = stopping
        self.decode = decode  # ids -> text, needed only for stop sequences
        # The W rows start identical: only the first may extend at step 0, so no hypothesis repeats.
        self.scores = np.full(width, -np.inf)  # [W] cumulative processed log-probability per live beam (-inf: dead)
        self.scores[0] = 0.0
        self.history: list[tuple[list[int], list[int], list[float]]] = []  # per step: (parents, tokens, raw) [W] each
        self.texts = [""] * width  # each live beam's text, kept only for stop sequences
        self.finished: list[Hypothesis] = []
        self.done = False

    def path(self, j: int) -> tuple[list[int], list[float]]:
        """Live beam j's generated ids and raw log-probabilities, read back through its parents."""
        ids, lps = [], []
        for parents, tokens, raw in reversed(self.history):
            ids.append(tokens[j])
            lps.append(raw[j])
            j = parents[j]
        ids.reverse()
        lps.reverse()
        return ids, lps

    def _scan(self, top: list[int], scores: list[float], raw: list[float], v: int):
        """Stop sequences: the step's candidates, best first, one at a time (each continuing candidate's text is
        decoded). Appends the hypotheses that end; returns the continuing ones' (parents, tokens, scores, raw)."""
        w = self.width
        parents, tokens, kept, kept_raw, texts = [], [], [], [], []
        for idx, score, lp in zip(top, scores, raw):
            if not math.isfinite(score):
                break
            parent, token = divmod(idx, v)
            if token == self.eos_id:
                if len(self.finished) < w:
                    ids, lps = self.path(parent)
                    self.finished.append(Hypothesis(ids, lps, "eos_token", eos_logprob=lp))
                continue
            ids, lps = self.path(parent)
            ids.append(token)
            text = self.decode(ids)
            stop, reason = self.stopping(len(ids), self.texts[parent], text)
            if stop and reason == "stop_sequence":
                if len(self.finished) < w:
                    self.finished.append(Hypothesis(ids, [*lps, lp], reason, text=text))
                continue
            parents.append(parent)
            tokens.append(token)
            kept.append(score)
            kept_raw.append(lp)
            texts.append(text)
            if len(parents) == w:
                break
        self.texts = texts + [""] * (w - len(texts))
        return parents, tokens, kept, kept_raw

    def _take(self, parents: list[int], tokens: list[int], raw: list[float], n_next: int) -> None:
        """The step's W beams (the first n_next live) are in: record them, finish live beams at the length limit,
        and decide whether the search has ended."""
        self.history.append((parents, tokens, raw))
        at_limit = n_next > 0 and len(self.history) >= self.stopping.max_new_tokens
        if at_limit:  # the limit: live beams finish as they are
            for j in range(n_next):
                ids, lps = self.path(j)
                self.finished.append(Hypothesis(ids, lps, "length", text=self.texts[j]))
        if len(self.finished) >= self.width or not n_next or at_limit:
            self.done = True

    def finalize(self) -> list[Hypothesis]:
        """The n_best hypotheses, best first; live beams count as finished by length if none ended."""
        hyps = self.finished
        if not hyps and self.history:
            live = np.flatnonzero(np.isfinite(self.scores)).tolist()
            hyps = [Hypothesis(*self.path(j), "length", text=self.texts[j]) for j in live]
        ranked = rank(hyps)[: self.n_best]
        for i, h in enumerate(ranked):
            h.index = i
        return ranked


class LengthPenaltySearch(BeamSearch):
    """Beam search as transformers' `generate` runs it (its `_beam_search`), for bundles imported from a Hugging Face
    checkpoint, so their beam answers are the ones transformers gives.

    Each step: the 2W best (beam, token) candidates by cumulative processed log-probability; those among the first
    W that end (the end token, or the length limit) are finished hypotheses scored by their sum over
    (generated tokens, the end token included) ** length_penalty, the W best kept; the first W that go on are the
    next beams. With `early_stopping` false the search ends once the best live beam, scored at its length, cannot
    beat the worst of W finished; with true, once W have finished; with "never", at the length limit where
    length_penalty > 0. `finalize` returns the finished hypotheses best first by that score."""

    def __init__(self, width, n_best, eos_id, stopping, decode=None, length_penalty=1.0, early_stopping=False):
        super().__init__(width, n_best, eos_id, stopping, decode)
        self.length_penalty = float(length_penalty)
        self.early_stopping = early_stopping
        self.hf_finished: list[tuple[float, Hypothesis]] = []
        self.improvable = True

    def update(self, processed: np.ndarray, raw: np.ndarray) -> tuple[list[int], list[int]]:
        """One step over the search's [W, V] log-probabilities: its next beams' (parents, tokens)."""
        w, v = processed.shape
        cur = len(self.history)  # tokens each live beam holds
        scores = (self.scores[:, None] + processed).ravel()
        k = min(2 * w, w * v)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        top_scores, top_raw = scores[top], raw.ravel()[top]
        parents, tokens = np.divmod(top, v)
        at_limit = cur + 1 >= self.stopping.max_new_tokens
        ends = (tokens == self.eos_id) | at_limit
        full = self.early_stopping is True and len(self.hf_finished) >= w
        if self.improvable and not full:
            norm = (cur + 1) ** self.length_penalty
            for j in np.flatnonzero(ends[:w] & np.isfinite(top_scores[:w])).tolist():
                ids, lps = self.path(int(parents[j]))
                if tokens[j] == self.eos_id:
                    hyp = Hypothesis(ids, lps, "eos_token", eos_logprob=float(top_raw[j]))
                else:
                    hyp = Hypothesis([*ids, int(tokens[j])], [*lps, float(top_raw[j])], "length")
                self.hf_finished.append((float(top_scores[j]) / norm, hyp))
            self.hf_finished.sort(key=lambda sh: -sh[0])  # stable: the earlier of two equal scores first
            del self.hf_finished[w:]
        live = np.flatnonzero(~ends & np.isfinite(top_scores))[:w]
        n_live = len(live)
        if n_live:
            fill = np.concatenate([live, np.full(w - n_live, live[0])])
            new_scores = np.concatenate([top_scores[live], np.full(w - n_live, -np.inf)])
        else:
            fill, new_scores = np.zeros(w, np.int64), np.full(w, -np.inf)
        self.scores = new_scores
        p_list, t_list = parents[fill].tolist(), tokens[fill].tolist()
        self.history.append((p_list, t_list, top_raw[fill].tolist()))
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_len = self.stopping.max_new_tokens
        else:
            best_len = cur + 1
        worst = self.hf_finished[-1][0] if len(self.hf_finished) >= w else -1.0e9
        self.improvable = self.improvable and bool(new_scores[0] / best_len**self.length_penalty > worst)
        all_full = self.early_stopping is True and len(self.hf_finished) >= w
        self.done = not self.improvable or all_full or not n_live or at_limit
        return p_list, t_list

    def finalize(self) -> list[Hypothesis]:
        ranked = [h for _, h in self.hf_finished][: self.n_best]
        for i, h in enumerate(ranked):
            h.index = i
        return ranked


def update_searches(
    searches: Sequence[BeamSearch], processed_logprobs: np.ndarray, raw_logprobs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step of n beam searches of one width W, over their rows' log-probabilities ([n, W, V] each), in one
    numpy pass (CTranslate2's batched beam search); searches with stop sequences scan their candidates in
    Python, as each candidate's text decides. Returns (parents, tokens) [n, W]: beam j of search i continues
    from its beam parents[i, j] with tokens[i, j] (`place_beams` says which rows they take). Sets a search's
    `done` when it has ended (its rows then need no further step).

    Every candidate scores beam score + processed log-prob; each search keeps its 2W + 1 best, ordered by
    score, ties towards the lower (beam, token). Each row of the pass is its search's alone (argpartition,
    the sorts and the running counts work row by row), so a search chooses the same whatever searches share
    its step."""
    n, w, v = processed_logprobs.shape
    if isinstance(searches[0], LengthPenaltySearch):
        chosen = [s.update(processed_logprobs[i], raw_logprobs[i]) for i, s in enumerate(searches)]
        return np.array([c[0] for c in chosen], np.int64), np.array([c[1] for c in chosen], np.int64)
    if n == 1 and not searches[0].stopping.stop:
        chosen = _update_one(searches[0], processed_logprobs[0], raw_logprobs[0])
        if chosen is not None:
            return chosen
    beam_scores = np.concatenate([s.scores for s in searches]).reshape(n, w, 1)  # one call, where np.stack makes n
    scores = (beam_scores + processed_logprobs).reshape(n, w * v)
    k = min(2 * w + 1, w * v)
    each = np.arange(n)[:, None]  # row indexing of [n, k] choices (take_along_axis costs more per call)
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    top = top[each, np.lexsort((top, -scores[each, top]), axis=1)]  # by score, ties towards the lower (beam, token)
    top_scores = scores[each, top]
    top_raw = raw_logprobs.reshape(n, w * v)[each, top]
    parents, tokens = np.divmod(top, v)
    eos_id = searches[0].eos_id
    # Most steps of most searches: the W best candidates are finite and none is the end token, so they are
    # the next beams. The other searches scan their candidates.
    irregular = ~np.isfinite(top_scores[:, w - 1]) | (tokens[:, :w] == eos_id).any(axis=1)
    scanned = [i for i, s in enumerate(searches) if s.stopping.stop]
    if scanned:
        irregular[scanned] = True
    n_next = [w] * n
    if not irregular.any():
        new_parents, new_tokens, new_scores, new_raw = parents[:, :w], tokens[:, :w], top_scores[:, :w], top_raw[:, :w]
    else:
        new_parents, new_tokens, new_scores, new_raw, n_next = _scan_irregular(
            searches, np.flatnonzero(irregular), top, top_scores, top_raw, parents, tokens, n_next, v
        )
    p_list, t_list, r_list = new_parents.tolist(), new_tokens.tolist(), new_raw.tolist()
    for i, s in enumerate(searches):
        s.scores = new_scores[i]
        s._take(p_list[i], t_list[i], r_list[i], n_next[i])
    return new_parents, new_tokens


def _update_one(search: BeamSearch, processed: np.ndarray, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`update_searches` for one search without stop sequences, in its most frequent step (its W best candidates
    finite, none the end token), with a third of the numpy calls: they run right after the decoder's, from cold
    caches, and at one request this choice is most of a beam step's Python. The same arithmetic (each candidate's
    score one float64 sum, the same argpartition over the same row) and the same order (score, then the lower
    (beam, token)), so the same beams; None for any other step, which the general pass takes."""
    w, v = processed.shape
    scores = (search.scores[:, None] + processed).ravel()
    k = min(2 * w + 1, w * v)
    top = np.argpartition(-scores, k - 1)[:k].tolist()
    candidate_scores = scores[top].tolist()
    order = sorted(range(k), key=lambda j: (-candidate_scores[j], top[j]))[:w]
    best = [top[j] for j in order]
    tokens = [c % v for c in best]
    if not math.isfinite(candidate_scores[order[-1]]) or search.eos_id in tokens:
        return None
    parents = [c // v for c in best]
    search.scores = np.array([candidate_scores[j] for j in order])
    search._take(parents, tokens, raw.ravel()[best].tolist(), w)
    return np.array([parents], dtype=np.int64), np.array([tokens], dtype=np.int64)


def _scan_irregular(searches, rows, top, top_scores, top_raw, parents, tokens, n_next, v):
    """The searches `rows` scan their candidates (best first, as BeamSearch says): as running counts over the
    candidates, or for stop sequences in Python (`BeamSearch._scan`). Appends the hypotheses that end with the
    end token; returns the next beams' (parents, tokens, scores, raw) [n, W] and how many live (n_next)."""
    w = searches[0].width
    eos_id = searches[0].eos_id
    sub = (parents[rows], tokens[rows], top_scores[rows], top_raw[rows])
    # The scan stops at the first score that is not finite, and once W candidates go on; an end token ends a
    # hypothesis while fewer than W have ended.
    valid = np.logical_and.accumulate(np.isfinite(sub[2]), axis=1)
    ends = sub[1] == eos_id
    goes_on = valid & ~ends
    went_on = np.cumsum(goes_on, axis=1)
    ended = valid & ends & ((went_on - goes_on) < w)  # ends where the scan reaches it
    ended &= np.array([len(searches[i].finished) for i in rows])[:, None] + np.cumsum(ended, axis=1) <= w
    goes_on &= went_on <= w
    order = np.argsort(~goes_on, axis=1, kind="stable")[:, :w]  # the continuing candidates first, best first
    each = np.arange(len(rows))[:, None]
    new = [a[:, :w].copy() for a in (parents, tokens, top_scores, top_raw)]
    for out, a in zip(new, sub):
        out[rows] = a[each, order]
    for r, i, count, ends_here in zip(range(len(rows)), rows.tolist(), goes_on.sum(axis=1).tolist(), ended.any(axis=1).tolist()):
        s = searches[i]
        if s.stopping.stop:  # a candidate's text decides whether it goes on
            found = s._scan(top[i].tolist(), top_scores[i].tolist(), top_raw[i].tolist(), v)
            count = len(found[0])
            for out, values in zip(new, found):
                out[i, :count] = values
        elif ends_here:  # hypotheses that end with the end token, in the order of the scan
            for j in np.flatnonzero(ended[r]).tolist():
                ids, lps = s.path(int(parents[i, j]))
                s.finished.append(Hypothesis(ids, lps, "eos_token", eos_logprob=float(top_raw[i, j])))
        n_next[i] = count
        if count < w:  # fewer live candidates than rows (a tiny vocabulary): dead beams follow the first
            p0, t0 = (new[0][i, 0], new[1][i, 0]) if count else (0, eos_id)  # (or beam 0, the end token)
            new[0][i, count:], new[1][i, count:], new[2][i, count:] = p0, t0, -np.inf
    return (*new, n_next)


_NO_ROWS = np.zeros(0, dtype=np.int64)


@functools.cache
def _earlier(w: int) -> np.ndarray:
    """[W, W] bool: k < j."""
    return np.tri(w, w, -1, dtype=bool)


def place_beams(slots: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which batch row each new beam takes, so that as few rows as can be take another row's cache: each parent's
    first child (in beam order) stays in its parent's row, and the other children take, in order, the rows of
    the beams that have no child. slots [n, W]: the rows of each search's beams, in beam order; parents [n, W]
    from update_searches. Returns (new slots [n, W], dest, src): rows dest take the cache of rows src. No row
    is in both, so the copies may run in any order."""
    n, w = parents.shape
    if n <= FEW_SEARCHES:
        return _place_few(slots.tolist(), parents.tolist())
    each = np.arange(n)[:, None]
    placed = slots[each, parents]  # every beam in its parent's row, to start with
    same = parents[:, :, None] == parents[:, None, :]  # [n, W, W]: beams j and k share a parent
    copies = (same & _earlier(w)).any(axis=2)  # a child after its parent's first
    if not copies.any():
        return placed, _NO_ROWS, _NO_ROWS
    src = placed[copies]
    childless = ~(parents[:, :, None] == np.arange(w)).any(axis=1)  # [n, W]: beam k of the last step has no child
    later_children = np.argsort(~copies, axis=1, kind="stable")  # the copying children first, in beam order
    free_rows = np.argsort(~childless, axis=1, kind="stable")  # the childless beams first, in beam order
    i, m = np.nonzero(np.arange(w) < copies.sum(axis=1)[:, None])
    placed[i, later_children[i, m]] = slots[i, free_rows[i, m]]
    return placed, placed[copies], src


FEW_SEARCHES = 8  # up to this many searches, place_beams in Python: a numpy call costs more than one search's placement


def _place_few(slots: list[list[int]], parents: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """place_beams, search by search in Python."""
    placed_all, dest, src = [], [], []
    for rows, par in zip(slots, parents):
        placed = [rows[p] for p in par]
        kept: set[int] = set()
        later = []  # a parent's children after its first, in beam order
        for j, p in enumerate(par):
            if p in kept:
                later.append(j)
            else:
                kept.add(p)
        if later:
            for j, free in zip(later, [r for k, r in enumerate(rows) if k not in kept]):
                src.append(placed[j])
                dest.append(free)
                placed[j] = free
        placed_all.append(placed)
    return np.array(placed_all, dtype=np.int64).reshape(len(slots), -1), np.array(dest, np.int64), np.array(src, np.int64)
