"""A checkpoint's generation rules (bundle.json `generation`): the logits processors transformers' `generate`
applies from a model's generation_config, applied here to every row of every step, on every route.

- `bad_words_ids`: a one-token entry is never chosen; a longer one bans its last token after its prefix.
- `suppress_tokens` never chosen; `begin_suppress_tokens` not as the first token.
- `min_length`: no end token before that many decoder positions (the start token counts, as transformers counts).
- `forced_bos_token_id` as the first token; `forced_eos_token_id` as the last one the row's length allows.
- `no_repeat_ngram_size` n: no token that would repeat an n-gram of the row's own ids (the start token included).

The static bans are one array of ids made once; the per-row ones are array writes over the rows they hit.
Only the rules that need a row's history (n-grams, multi-token bad words) read it, as one [R, L] array.
`apply` masks the step's log-probabilities in place, not renormalised, as transformers' processors leave them: the
step's token choice (service/engine/step.py) takes them as they are, so greedy, sampling and beam search all see the
same rules, and beams are scored as transformers scores them. A step whose rows only take the argmax masks the raw
logits instead (the engine's step): a row's log-probabilities are its logits less one constant, so the argmax is the
same, and a [R, V] float64 log-softmax is not worth paying for a choice it cannot change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RULE_FIELDS = (
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "min_length",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "no_repeat_ngram_size",
)
FORCED_IDS = ("forced_bos_token_id", "forced_eos_token_id")


@dataclass(frozen=True)
class GenerationRules:
    start_id: int  # the decoder start token: position 0 of every row's history
    banned: np.ndarray | None  # [K] int64: the ids never chosen
    begin_ban: np.ndarray | None  # ids not chosen first
    bad_sequences: tuple[tuple[int, ...], ...]  # multi-token bad words
    min_length: int
    eos_ids: tuple[int, ...]
    forced_bos: int | None
    forced_eos: int | None
    no_repeat_ngram: int

    @classmethod
    def of(cls, generation: dict | None, vocab_size: int, start_id: int, eos_id: int) -> GenerationRules | None:
        """The rules bundle.json's `generation` sets (None when it sets none)."""
        g = generation or {}
        # an id of 0 is a rule (Marian's </s> is 0: its forced_eos_token_id), a length or n-gram size of 0 is none
        if not any(g.get(k) is not None if k in FORCED_IDS else g.get(k) for k in RULE_FIELDS):
            return None
        singles = [w[0] for w in g.get("bad_words_ids") or [] if len(w) == 1]
        banned = sorted({i for i in [*singles, *(g.get("suppress_tokens") or [])] if 0 <= i < vocab_size})
        eos = g.get("eos_token_id", eos_id)
        return cls(
            start_id=start_id,
            banned=np.array(banned, np.int64) if banned else None,
            begin_ban=np.array(g["begin_suppress_tokens"], np.int64) if g.get("begin_suppress_tokens") else None,
            bad_sequences=tuple(tuple(w) for w in g.get("bad_words_ids") or [] if len(w) > 1),
            min_length=int(g.get("min_length") or 0),
            eos_ids=tuple(eos) if isinstance(eos, list) else (int(eos),),
            forced_bos=g.get("forced_bos_token_id"),
            forced_eos=g.get("forced_eos_token_id"),
            no_repeat_ngram=int(g.get("no_repeat_ngram_size") or 0),
        )

    def apply(self, x: np.ndarray, n_generated: np.ndarray, limits: np.ndarray, history) -> np.ndarray:
        """x [R, V] (the step's log-probabilities, or its raw logits where only the argmax reads them): the rules
        applied IN PLACE (the caller's own fresh array), and returned. n_generated [R]: tokens each row has
        generated; limits [R]: the most it may; `history()`: [R, L] int64 of each row's ids so far, the start token
        first (-1 pads shorter rows), called only when a rule reads it."""
        if self.banned is not None:
            x[:, self.banned] = -np.inf
        first = n_generated == 0
        if self.begin_ban is not None and first.any():
            x[np.ix_(np.flatnonzero(first), self.begin_ban)] = -np.inf
        if self.min_length:  # transformers' MinLength: the decoder's length, the start token included
            early = np.flatnonzero(n_generated + 1 < self.min_length)
            if early.size:
                x[np.ix_(early, np.array(self.eos_ids))] = -np.inf
        if self.no_repeat_ngram or self.bad_sequences:
            ids = history()
            if self.no_repeat_ngram:
                _ban_repeats(x, ids, self.no_repeat_ngram)
            for seq in self.bad_sequences:
                _ban_after(x, ids, seq)
        if self.forced_bos is not None and first.any():
            _force(x, np.flatnonzero(first), self.forced_bos)
        if self.forced_eos is not None:
            last = np.flatnonzero(n_generated == limits - 1)
            if last.size:
                _force(x, last, self.forced_eos)
        return x


def _force(x: np.ndarray, rows: np.ndarray, token: int) -> None:
    x[rows] = -np.inf
    x[rows, token] = 0.0


def _ban_repeats(x: np.ndarray, ids: np.ndarray, n: int) -> None:
    """transformers' NoRepeatNGram over [R, L] histories (-1 padded on the right), every row at once."""
    r, length = ids.shape
    if length < n:
        return
    real = (ids >= 0).sum(axis=1)  # [R]
    windows = np.lib.stride_tricks.sliding_window_view(ids, n, axis=1)  # [R, L-n+1, n]
    tail_at = real - (n - 1)  # where each row's last n-1 ids start
    cols = tail_at[:, None] + np.arange(n - 1)[None, :]
    tails = np.take_along_axis(ids, np.clip(cols, 0, length - 1), axis=1)  # [R, n-1]
    match = (windows[:, :, : n - 1] == tails[:, None, :]).all(axis=2)  # [R, L-n+1]
    match &= np.arange(windows.shape[1])[None, :] + n <= real[:, None]  # whole n-grams of the row's own ids
    match &= (real >= n)[:, None]
    rows, at = np.nonzero(match)
    x[rows, windows[rows, at, n - 1]] = -np.inf


def _ban_after(x: np.ndarray, ids: np.ndarray, seq: tuple[int, ...]) -> None:
    """Ban seq's last token in rows whose ids end with seq's prefix."""
    prefix = np.array(seq[:-1], np.int64)
    real = (ids >= 0).sum(axis=1)
    if ids.shape[1] < len(prefix):
        return
    cols = (real - len(prefix))[:, None] + np.arange(len(prefix))[None, :]
    ok = (cols >= 0).all(axis=1)
    tails = np.take_along_axis(ids, np.clip(cols, 0, ids.shape[1] - 1), axis=1)
    rows = np.flatnonzero(ok & (tails == prefix[None, :]).all(axis=1))
    x[rows, seq[-1]] = -np.inf


def row_histories(rows, start_id: int) -> np.ndarray:
    """[R, L] int64: each row's ids so far (its beam's path for a beam row), the start token first, -1 padded;
    a free slot is the start token alone."""
    seqs = []
    for row in rows:
        if row is None or row.generation is None:
            seqs.append([start_id])
            continue
        search = row.generation.search
        ids = search.path(row.generation.rows.index(row))[0] if search is not None and search.history else row.token_ids
        seqs.append([start_id, *ids])
    out = np.full((len(seqs), max(map(len, seqs))), -1, np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out
