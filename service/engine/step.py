"""Which token comes next: the one module every decode loop calls.

The ONNX engine (service/engine/engine.py), the PyTorch reference decoder
(training/decode.py, which `attnserve-export verify` compares with) and the
/explain loop (service/engine/explain.py) all produce a step's logits their own way,
then hand them here. Nothing else in the tree picks a token, seeds a
generator or decides that a sequence has stopped.

- `DecodingOptions`: a request's settings, validated once (`InputError` says what to fix).
- Logit processors work on a whole step `[R, V]` with one parameter vector per
  row (`RowParams`), in the order Hugging Face and TGI apply them: repetition
  penalty, frequency and presence penalties, end token suppressed before `min_new_tokens`,
  temperature, top-k, top-p, typical-p. Rows with different settings share one
  call; a processor touches only the rows that use it.
- Token choice: greedy is the argmax of the processed row (the lowest id among
  ties); sampling is the shared sampler of ARCHITECTURE.md: each row owns a
  `numpy.random.default_rng`, draws exactly ONE uniform per step, and picks by
  inverse CDF over the processed distribution in float64 (token-id order, so a
  filtered token has zero width and is never chosen). `sample_rows` does the
  arithmetic for all sampled rows at once.
- `BeamSearch`: a request that owns W rows; `update_searches` turns a step's
  log-probs into each search's W surviving beams (parents and tokens, so the
  caller gathers its KV cache rows by parent: `ActiveBatch.reorder`), all the
  searches of one width at once; `finalize` ranks the hypotheses.
- `StoppingCriteria`: end token, length, stop sequences, as TGI's: `(stop, reason)`.
- Seeding: `request_seed` and `row_generator`.

One meaning of a token's `logprob` everywhere: the model's raw log-probability,
the log-softmax of the step's logits BEFORE any processor. Every n-best list is
ranked by one rule: the mean raw log-probability of a sequence's generated
tokens, the end token included (TGI's best_of rule, and beam search's length
normalisation with exponent 1). Beam search itself accumulates the processed
log-probabilities, so penalties steer the search; without processors the two
are the same.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np


class InputError(ValueError):
    """A request the engine cannot honour; the message says what to fix."""


def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


@dataclass(frozen=True)
class DecodingOptions:
    """One request's decoding settings (TGI's names, plus `num_beams`)."""

    max_new_tokens: int = 32
    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    typical_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None  # OpenAI's: minus this once a token has been generated at all
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    # eos is suppressed until this many tokens (Hugging Face's min_new_tokens); the benchmark uses
    # it to force exact output lengths from any model, and it lifts the bundle's length bound.
    min_new_tokens: int = 0
    # n-best: sampled candidates when sampling (TGI), beam search of width max(best_of, num_beams) otherwise
    best_of: int = 1
    num_beams: int | None = None
    top_n_tokens: int = 0  # the n most likely tokens of every step, with their log-probabilities
    # each token's text as it is chosen (a stream's deltas, TGI's details, /explain); off, the answer's
    # text is decoded once at its end: a tokenizer call per token saved where nobody reads them
    token_text: bool = True

    def __post_init__(self) -> None:
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.temperature is not None and not self.temperature > 0:
            raise InputError(f"temperature must be > 0, got {self.temperature!r}")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 0):
            raise InputError(f"top_k must be a non-negative integer (0 = off), got {self.top_k!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.typical_p is not None and not 0 < self.typical_p <= 1:
            raise InputError(f"typical_p must be in (0, 1], got {self.typical_p!r}")
        if self.repetition_penalty is not None and not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be > 0, got {self.repetition_penalty!r}")
        if self.frequency_penalty is not None and not -2.0 <= self.frequency_penalty <= 2.0:
            raise InputError(f"frequency_penalty must be between -2 and 2, got {self.frequency_penalty!r}")
        if self.presence_penalty is not None and not -2.0 <= self.presence_penalty <= 2.0:
            raise InputError(f"presence_penalty must be between -2 and 2, got {self.presence_penalty!r}")
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise InputError(f"seed must be a non-negative integer, got {self.seed!r}")
        if not _is_int(self.min_new_tokens) or not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise InputError(f"min_new_tokens must be between 0 and max_new_tokens, got {self.min_new_tokens!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise InputError("stop must be a list of non-empty strings")
        object.__setattr__(self, "stop", tuple(self.stop))
        if not _is_int(self.best_of) or self.best_of < 1:
            raise InputError(f"best_of must be a positive integer, got {self.best_of!r}")
        if self.num_beams is not None and (not _is_int(self.num_beams) or self.num_beams < 1):
            raise InputError(f"num_beams must be a positive integer, got {self.num_beams!r}")
        if self.num_beams is not None and self.num_beams > 1 and self.sampling:
            raise InputError("num_beams is beam search, which does not sample: drop num_beams, or the sampling parameters")
        if not _is_int(self.top_n_tokens) or self.top_n_tokens < 0:
            raise InputError(f"top_n_tokens must be a non-negative integer, got {self.top_n_tokens!r}")

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def sampling(self) -> bool:
        """TGI semantics: sample iff asked to, or any sampling parameter is set (top_k 0 = off)."""
        return bool(
            self.do_sample
            or self.temperature is not None
            or self.top_k
            or self.top_p is not None
            or (self.typical_p is not None and self.typical_p < 1.0)
        )

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def beam_search(self) -> bool:
        """Beam search: not sampling, and best_of > 1 or num_beams given (num_beams=1 is beam search of width 1)."""
        return not self.sampling and (self.best_of > 1 or self.num_beams is not None)

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def beam_width(self) -> int:
        return max(self.best_of, self.num_beams or 1)

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def n_rows(self) -> int:
        """Batch rows the request owns: its beams, its best_of samples, or 1."""
        return self.beam_width if self.beam_search else (self.best_of if self.sampling else 1)

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def n_best(self) -> int:
        """Hypotheses returned, best first."""
        return self.best_of

    @cached_property  # read every step for every row: computed once (the options are frozen)
    def streams(self) -> bool:
        """Whether its tokens can be streamed as they come: one row, decided token by token."""
        return self.n_rows == 1 and not self.beam_search


# ---- seeding ------------------------------------------------------------------------------------
def request_seed(options: DecodingOptions) -> int | None:
    """The seed a sampled request uses: its own, or one picked here (and reported back); None for greedy/beam."""
    if not options.sampling:
        return None
    return options.seed if options.seed is not None else secrets.randbits(63)


def row_generator(seed: int, index: int, n_rows: int) -> np.random.Generator:
    """A sampled row's generator: `default_rng(seed)` for a single-row request, so a seed means the
    same thing with or without the server; candidate i of a best_of request draws from
    `default_rng([seed, i])`, so candidates differ and each is reproducible on its own."""
    return np.random.default_rng(seed if n_rows == 1 else [seed, index])


# ---- logit processors ---------------------------------------------------------------------------
# Modes of a row: how its token is chosen.
GREEDY, SAMPLE, BEAM = 0, 1, 2


class RowParams:
    """Processor parameters as one vector per batch row, so a step with rows of different settings is
    processed with array operations. Neutral values mean "off".

    The vectors are the columns of one structured array (`table`; `params.top_k` is a view of its column): a
    row joining or a batch rebuilt is one numpy call, not one per field (ten, each a few microseconds in a
    decode loop's cold caches, paid by every request at its join).
    """

    FIELDS = {
        "mode": (np.int8, GREEDY),
        "temperature": (np.float64, 1.0),
        "top_k": (np.int64, 0),
        "top_p": (np.float64, 1.0),
        "typical_p": (np.float64, 1.0),
        "repetition_penalty": (np.float64, 1.0),
        "frequency_penalty": (np.float64, 0.0),
        "presence_penalty": (np.float64, 0.0),
        "min_new_tokens": (np.int64, 0),
        "top_n_tokens": (np.int64, 0),
        "logprobs": (np.bool_, False),
    }

    DTYPE = np.dtype([(name, dtype) for name, (dtype, _) in FIELDS.items()])
    NEUTRAL = tuple(neutral for _, neutral in FIELDS.values())

    def __init__(self, n: int = 0, table: np.ndarray | None = None):
        self.table = np.array([self.NEUTRAL] * n, self.DTYPE) if table is None else table  # [B] records of DTYPE
        self._needs_processing: np.ndarray | None = None

    def __getattr__(self, name: str) -> np.ndarray:
        """A field's column, e.g. `params.temperature` [B] (a view: writing it writes the table)."""
        if name in RowParams.FIELDS:
            return self.table[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @staticmethod
    def values(options: DecodingOptions) -> dict[str, object]:
        mode = BEAM if options.beam_search else SAMPLE if options.sampling else GREEDY
        sampled = mode == SAMPLE
        return {
            "mode": mode,
            "temperature": options.temperature if sampled and options.temperature is not None else 1.0,
            "top_k": options.top_k or 0 if sampled else 0,
            "top_p": options.top_p if sampled and options.top_p is not None else 1.0,
            "typical_p": options.typical_p if sampled and options.typical_p is not None else 1.0,
            "repetition_penalty": options.repetition_penalty or 1.0,
            "frequency_penalty": options.frequency_penalty or 0.0,
            "presence_penalty": options.presence_penalty or 0.0,
            "min_new_tokens": options.min_new_tokens,
            "top_n_tokens": options.top_n_tokens,
            # the raw log-probability is needed to report it, and to rank n-best lists
            "logprobs": options.logprobs or options.top_n_tokens > 0 or options.n_rows > 1 or options.beam_search,
        }

    @classmethod
    def record(cls, options: DecodingOptions) -> tuple:
        """The options' row of the table."""
        return tuple(cls.values(options).values())

    def set_row(self, i: int, options: DecodingOptions) -> None:
        self.table[i] = self.record(options)
        self._needs_processing = None

    def take(self, idx: np.ndarray, add: Sequence[DecodingOptions] = ()) -> RowParams:
        """The rows `idx` (in order), then one row per option in `add`."""
        # through Python tuples: numpy concatenates structured arrays field by field (20 vs 5 us)
        return RowParams(table=np.array(self.table[idx].tolist() + [self.record(o) for o in add], self.DTYPE))

    @property
    def needs_processing(self) -> np.ndarray:
        """[B] bool: rows whose token is chosen from processed logits: sampled rows and rows with a
        penalty (min_new_tokens alone is handled on the in-graph argmax or, for beams, on the raw
        log-probabilities; see pick_tokens and _searches_by_width). Kept until a row changes."""
        if self._needs_processing is None:
            self._needs_processing = (
                (self.mode == SAMPLE)
                | (self.repetition_penalty != 1.0)
                | (self.frequency_penalty != 0.0)
                | (self.presence_penalty != 0.0)
            )
        return self._needs_processing


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities in float64; works on [V] or [R, V]."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    if np.isfinite(m).all():  # the model's own logits: the common case, without the guards (a step reports them)
        shifted = x - m
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    m = np.where(np.isfinite(m), m, 0.0)  # a row with every token barred stays -inf, not nan
    shifted = x - m
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def softmax(logits: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(logits))


def process_logits(
    logits: np.ndarray,
    params: RowParams,
    counts: np.ndarray | None,
    n_generated: np.ndarray,
    eos_id: int,
) -> np.ndarray:
    """The float64 logits tokens are chosen from, for R rows; -inf marks a token that cannot be chosen.

    logits [R, V] float; `params` R rows; counts [R, V] (how often each token was generated so far,
    for the penalties; None when no row has one); n_generated [R]. Returns a new [R, V] float64 array.
    """
    x = np.array(logits, dtype=np.float64)
    v = x.shape[-1]
    if counts is not None:
        rows = np.flatnonzero(params.repetition_penalty != 1.0)
        if rows.size:  # CTRL's penalty (Hugging Face's): a seen token's logit / p when positive, * p when negative
            p = params.repetition_penalty[rows, None]
            seen = counts[rows] > 0
            xr = x[rows]
            x[rows] = np.where(seen, np.where(xr > 0, xr / p, xr * p), xr)
        rows = np.flatnonzero(params.frequency_penalty != 0.0)
        if rows.size:  # OpenAI's / TGI's: minus penalty x times the token was generated
            x[rows] -= params.frequency_penalty[rows, None] * counts[rows]
        rows = np.flatnonzero(params.presence_penalty != 0.0)
        if rows.size:  # OpenAI's: minus penalty once for every token generated at least once
            x[rows] -= params.presence_penalty[rows, None] * (counts[rows] > 0)
    forced = np.flatnonzero(n_generated < params.min_new_tokens)
    if forced.size:
        x[forced, eos_id] = -np.inf
    rows = np.flatnonzero(params.temperature != 1.0)
    if rows.size:
        x[rows] /= params.temperature[rows, None]
    rows = np.flatnonzero((params.top_k > 0) & (params.top_k < v))
    if rows.size:
        x[rows] = _top_k(x[rows], params.top_k[rows])
    rows = np.flatnonzero(params.top_p < 1.0)
    if rows.size:
        x[rows] = _top_p(x[rows], params.top_p[rows])
    rows = np.flatnonzero(params.typical_p < 1.0)
    if rows.size:
        x[rows] = _typical_p(x[rows], params.typical_p[rows])
    return x


def _descending(x: np.ndarray) -> np.ndarray:
    """Column order of each row, largest first, ties towards the lower id (deterministic)."""
    return np.argsort(-x, axis=-1, kind="stable")


def _keep_sorted(x: np.ndarray, order: np.ndarray, keep_sorted: np.ndarray) -> np.ndarray:
    """x with -inf where the sorted-order mask is False (the first sorted column always kept)."""
    keep_sorted[:, 0] = True
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return np.where(keep, x, -np.inf)


def _top_k(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Keep each row's k largest logits."""
    order = _descending(x)
    return _keep_sorted(x, order, np.arange(x.shape[-1])[None, :] < k[:, None])


def _top_p(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Nucleus: keep the smallest set of most likely tokens whose probability reaches p (at least one)."""
    order = _descending(x)
    probs = softmax(np.take_along_axis(x, order, axis=-1))
    before = np.cumsum(probs, axis=-1) - probs  # mass strictly before each token in sorted order
    return _keep_sorted(x, order, before < p[:, None])


def _typical_p(x: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Locally typical sampling (Meister et al.; Hugging Face's TypicalLogitsWarper): keep the tokens
    whose surprisal is closest to the entropy, until their probability reaches `mass`."""
    logp = log_softmax(x)
    p = np.exp(logp)
    entropy = -np.nansum(np.where(p > 0, logp * p, 0.0), axis=-1, keepdims=True)
    shifted = np.abs(-logp - entropy)  # +inf for filtered tokens: they sort last
    order = np.argsort(shifted, axis=-1, kind="stable")
    sorted_shifted = np.take_along_axis(shifted, order, axis=-1)
    cum = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    last = np.minimum((cum < mass[:, None]).sum(axis=-1), x.shape[-1] - 1)
    cutoff = np.take_along_axis(sorted_shifted, last[:, None], axis=-1)
    return _keep_sorted(x, order, sorted_shifted <= cutoff)


def greedy_tokens(processed: np.ndarray) -> np.ndarray:
    """[R] argmax of each row (the lowest id among ties, as numpy and torch both pick)."""
    return np.argmax(processed, axis=-1)


def sample_rows(processed: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """[R] token ids by inverse CDF over each row's processed distribution, one uniform per row."""
    weights = np.exp(processed - np.max(processed, axis=-1, keepdims=True))  # exp(-inf) = 0: filtered
    cumsum = np.cumsum(weights, axis=-1)
    target = uniforms * cumsum[:, -1]
    idx = (cumsum <= target[:, None]).sum(axis=-1)  # searchsorted(cumsum, target, side="right") per row
    return np.minimum(idx, processed.shape[-1] - 1)  # u * total < total, so this only guards rounding


def draw_uniforms(generators: Sequence[np.random.Generator]) -> np.ndarray:
    """Exactly one uniform per sampled row per step, whatever else is in the batch."""
    return np.fromiter((g.random() for g in generators), dtype=np.float64, count=len(generators))


def top_tokens(raw_logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n most likely tokens of one row [V] with their raw log-probabilities, most likely first."""
    n = min(n, raw_logprobs.shape[-1])
    idx = np.argpartition(-raw_logprobs, n - 1)[:n]
    idx = idx[np.lexsort((idx, -raw_logprobs[idx]))]
    return [(int(i), float(raw_logprobs[i])) for i in idx]


# ---- hypotheses and stopping ----------------------------------------------------------------------
@dataclass
class Hypothesis:
    """One finished sequence: generated ids (without the end token) and raw log-probabilities."""

    token_ids: list[int]
    logprobs: list[float]  # raw, aligned with token_ids
    finish_reason: str
    eos_logprob: float | None = None  # the end token's, when it ended the sequence
    seed: int | None = None
    index: int = 0  # which candidate (best_of) or beam it was
    text: str = ""

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids) + (self.finish_reason == "eos_token")

    @property
    def score(self) -> float:
        """The ranking rule: mean raw log-probability of the generated tokens, the end token included."""
        lps = [*self.logprobs, *([self.eos_logprob] if self.eos_logprob is not None else [])]
        return float(np.mean(lps)) if lps else 0.0


def rank(hypotheses: Sequence[Hypothesis]) -> list[Hypothesis]:
    """Best first by `Hypothesis.score`; ties keep their order (candidate index)."""
    return sorted(hypotheses, key=lambda h: -h.score)


@dataclass(frozen=True)
class StoppingCriteria:
    """When a sequence stops besides its end token: its length bound and stop sequences (TGI's)."""

    max_new_tokens: int
    stop: tuple[str, ...] = ()

    def __call__(self, n_tokens: int, old_text: str, new_text: str) -> tuple[bool, str | None]:
        """(stop, reason) after a token was appended: old_text/new_text are the decodes before/after it."""
        if self.stop and any(new_text.find(s, max(0, len(old_text) - len(s) + 1)) != -1 for s in self.stop):
            return True, "stop_sequence"
        if n_tokens >= self.max_new_tokens:
            return True, "length"
        return False, None


def length_limit(options: DecodingOptions, bound: int | None) -> int:
    """Most tokens a request may generate: what it asked for, within the bundle's length bound for its
    source (None: no bound). min_new_tokens lifts the bound (the benchmark forces lengths with it)."""
    if bound is None or options.min_new_tokens > 0:
        return options.max_new_tokens
    return max(1, min(options.max_new_tokens, bound))


# ---- beam search --------------------------------------------------------------------------------
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


# ---- the rows of a batch, and one step's token choice ---------------------------------------------
@dataclass(eq=False)
class Row:
    """One batch row of a generation: a single answer, a best_of candidate, or a beam."""

    generation: Generation | None  # None once the row has left its batch (RowState.free)
    index: int  # candidate / beam number within its generation
    seed: int | None = None
    rng: np.random.Generator | None = None
    token_ids: list[int] = field(default_factory=list)  # generated, without bos/eos (beams keep theirs in the search)
    logprobs: list[float] = field(default_factory=list)  # raw, aligned with token_ids
    text: str = ""
    finish_reason: str | None = None
    eos_logprob: float | None = None
    slot: int = -1  # its row in the batch arrays; -1 when not in a batch

    def hypothesis(self) -> Hypothesis:
        reason = self.finish_reason or "length"
        return Hypothesis(list(self.token_ids), list(self.logprobs), reason, self.eos_logprob, self.seed, self.index, self.text)


@dataclass(eq=False)
class Generation:
    """One request's decoding state: its rows, its search, and when done its ranked hypotheses.
    Identity, not value, makes two generations different. `cross`/`bias` are the decode loop's
    own per-request encoder state (the engine: numpy K/V and bias), shared by the rows."""

    source_ids: list[int]
    options: DecodingOptions
    max_new_tokens: int  # options.max_new_tokens within the model's limit and the bundle's length bound
    seed: int | None  # a sampled request's seed (picked here if none was given)
    stopping: StoppingCriteria
    cross: list = field(default_factory=list)
    bias: object = None
    rows: list[Row] = field(default_factory=list)
    search: BeamSearch | None = None
    hypotheses: list[Hypothesis] = field(default_factory=list)  # ranked, best first, once finished
    finish_reason: str | None = None

    @property
    def source_len(self) -> int:
        return len(self.source_ids)

    @property
    def streams(self) -> bool:
        return self.options.streams

    @property
    def best(self) -> Hypothesis | Row:
        return self.hypotheses[0] if self.hypotheses else self.rows[0]

    @property
    def token_ids(self) -> list[int]:
        return self.best.token_ids

    @property
    def text(self) -> str:
        return self.best.text

    @property
    def logprobs(self) -> list[float] | None:
        return self.best.logprobs if self.options.logprobs else None

    @property
    def generated_tokens(self) -> int:
        return self.hypotheses[0].generated_tokens if self.hypotheses else len(self.rows[0].token_ids)


def new_generation(source_ids: list[int], options: DecodingOptions, length_bound: int | None, eos_id: int, decode) -> Generation:
    """A request's decoding state with its rows, seeded by the seeding rule; `decode`: ids -> text."""
    stopping = StoppingCriteria(length_limit(options, length_bound), options.stop)
    seed = request_seed(options)
    gen = Generation(list(source_ids), options, stopping.max_new_tokens, seed, stopping)
    n_rows = options.n_rows
    for r in range(n_rows):
        gen.rows.append(Row(gen, r, seed, row_generator(seed, r, n_rows) if seed is not None else None))
    if options.beam_search:
        gen.search = BeamSearch(options.beam_width, options.n_best, eos_id, stopping, decode)
    return gen


@dataclass
class StepResult:
    """What a step produced for one generation. A streaming generation (one row) gets one per
    token; a generation of several rows gets one when it finishes (its hypotheses are then on it)."""

    generation: Generation
    token_id: int  # the eos id when finish_reason == "eos_token" (not added to token_ids)
    text: str  # the streamed text delta ("" for eos)
    logprob: float | None
    finish_reason: str | None
    special: bool  # True for the eos token
    top_tokens: list[tuple[int, float]] | None = None  # (id, raw logprob), most likely first


class RowState:
    """Who occupies each row of a batch and what token choice reads per row, as arrays: the
    processor parameters, the generated-token counts (penalties) and the tokens generated.
    A decode loop keeps one beside its cache and calls `put`/`free`/`take`/`gather` when its
    rows change, so the two stay aligned."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.rows: list[Row | None] = []
        self.active = np.zeros(0, dtype=bool)
        self.params = RowParams(0)
        self.counts = np.zeros((0, vocab_size), np.int32)  # [B, V]
        # a row's generated-token count is the steps since it joined: one counter for the batch, one join
        # step per row, so a step adds 1 to an int instead of running an array operation
        self.steps = 0
        self.joined_at = np.zeros(0, np.int64)  # [B]
        self.penalised = False  # whether any row has a penalty: only then are token counts kept (only such rows read them)
        self._summary: StepSummary | None = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def n_generated(self) -> np.ndarray:
        """[B] tokens each row has generated (free slots: meaningless)."""
        return self.steps - self.joined_at

    @property
    def summary(self) -> StepSummary:
        """What the active rows need from a step, kept until a row joins or leaves: a step whose rows
        need nothing beyond the in-graph argmax skips every array operation of the general path."""
        if self._summary is None:
            active, params = self.active, self.params
            ends_from = (self.joined_at + params.min_new_tokens).tolist()  # each row's join step plus its min_new_tokens
            self._summary = StepSummary(
                active_rows=np.flatnonzero(active).tolist(),
                logprobs=bool((params.logprobs & active).any()),
                processing=bool((params.needs_processing & active).any()),
                # greedy rows whose in-graph argmax may have to give way: with min_new_tokens, no other processing
                min_new_until=[
                    (i, ends_from[i])
                    for i in np.flatnonzero(
                        (params.min_new_tokens > 0) & active & (params.mode == GREEDY) & ~params.needs_processing
                    ).tolist()
                ],
                ends_from=ends_from,
            )
        return self._summary

    def put(self, i: int, row: Row) -> None:
        opts = row.generation.options
        self.params.set_row(i, opts)
        self.counts[i] = 0
        self.joined_at[i] = self.steps
        self.penalised = self.penalised or bool(opts.repetition_penalty or opts.frequency_penalty or opts.presence_penalty)
        self.active[i] = True
        row.slot = i
        self.rows[i] = row
        self._summary = None

    def free(self, row: Row) -> int | None:
        """The row leaves; returns its slot (None if it was not here)."""
        i = row.slot
        if i < 0 or i >= len(self.rows) or self.rows[i] is not row:
            return None
        self.rows[i] = None
        self.active[i] = False
        row.slot = -1
        # drop the back-reference: rows <-> generation is a reference cycle, so every request's state would wait
        # for the cyclic collector (at 64 clients, 119 collections per 4,000 requests against 16 without it)
        row.generation = None
        self._summary = None
        return i

    def take(self, keep: np.ndarray, add: Sequence[Row]) -> None:
        """Keep rows `keep` (in order), then append `add`: the arrays are rebuilt and slots renumbered."""
        n_add = len(add)
        self.params = self.params.take(keep, [q.generation.options for q in add])
        self.counts = np.concatenate([self.counts[keep], np.zeros((n_add, self.vocab_size), np.int32)])
        self.joined_at = np.concatenate([self.joined_at[keep], np.full(n_add, self.steps, np.int64)])
        self.rows = [self.rows[i] for i in keep] + list(add)
        self.active = np.array([q is not None for q in self.rows], dtype=bool)
        self.penalised = any(
            bool(o.repetition_penalty or o.frequency_penalty or o.presence_penalty)
            for o in (q.generation.options for q in self.rows if q is not None)
        )
        for i, q in enumerate(self.rows):
            if q is not None:
                q.slot = i
        self._summary = None

    def gather(self, dest: np.ndarray, src: np.ndarray) -> None:
        """Rows `dest` continue from rows `src` (beams from their parents)."""
        self.counts[dest] = self.counts[src]
        self.joined_at[dest] = self.joined_at[src]

    def advance(self, tokens: np.ndarray) -> None:
        """After a step: every active row counts its token (per token id only where a penalty reads it)."""
        if self.penalised:
            idx = np.flatnonzero(self.active)
            self.counts[idx, tokens[idx]] += 1
        self.steps += 1


@dataclass(frozen=True)
class StepSummary:
    """The active rows, whether any of them reports log-probabilities or has its logits processed, and
    which greedy rows have no processor but min_new_tokens (they keep the in-graph argmax unless it is
    the end token)."""

    active_rows: list[int]
    logprobs: bool
    processing: bool
    min_new_until: list[tuple[int, int]]  # (row, the step count from which its end token may be chosen)
    ends_from: list[int]  # every row's step count from which its end token may be chosen (free slots: meaningless)


@dataclass
class StepChoice:
    tokens: np.ndarray  # [B] the token each row feeds next (beam rows: after their reorder)
    reorder: tuple[np.ndarray, np.ndarray] | None  # (dest, src): rows dest take the cache of rows src (beam search)
    leaving: list[Row]  # rows that finished this step
    results: list[StepResult]


@dataclass(slots=True)
class PickedTokens:
    """Every row's token of one step, and the distributions they were picked from."""

    tokens: np.ndarray  # [B] int64
    token_list: list[int]  # the same, as Python ints: the per-row work reads them (indexing numpy per row costs more)
    raw: np.ndarray | None  # [B, V] the model's own log-probabilities; None when no row reports or ranks by them
    processed_rows: np.ndarray  # the rows picked from processed logits (sampling, penalties), in row order
    processed: np.ndarray | None  # [len(processed_rows), V] their processed logits


_NO_ROWS = np.zeros(0, dtype=np.int64)  # no row needs processing


def choose_tokens(state: RowState, logits: np.ndarray, next_tokens: np.ndarray | None, eos_id: int, decode) -> StepChoice:
    """One step's token choice for every row of a batch, and what follows from it.

    logits [B, V] (float32 or 64) from any decode loop; next_tokens [B]: an in-graph argmax, used
    for rows that need no processing (None: computed here). `decode`: ids -> text. Updates the
    rows, the searches and `state` (counts, and the gathers of beam rows); the caller applies
    `reorder` to its cache, feeds `tokens`, and frees `leaving` from its cache and from `state`.
    """
    picked = pick_tokens(state, logits, next_tokens, eos_id)
    results, leaving, done, searches = advance_rows(state, picked, eos_id, decode)
    reorder = advance_searches(state, picked, searches, done, leaving, eos_id) if searches else None
    if done:
        report_finished(done, results, eos_id, decode)
    state.advance(picked.tokens)
    return StepChoice(picked.tokens, reorder, leaving, results)


def pick_tokens(state: RowState, logits: np.ndarray, next_tokens: np.ndarray | None, eos_id: int) -> PickedTokens:
    """Every row's token: the argmax (in-graph when given), kept from the end token before a greedy row's
    min_new_tokens, and for sampled or penalised rows the choice over their processed logits. Beam rows'
    tokens are replaced by their searches' (advance_searches)."""
    summary = state.summary
    # the in-graph argmax is the caller's to give (the engine's is a fresh array): corrected in place below
    tokens = np.asarray(next_tokens, dtype=np.int64) if next_tokens is not None else greedy_tokens(logits)
    raw = log_softmax(logits) if summary.logprobs else None  # [B, V] the model's own log-probs
    token_list = tokens.tolist()
    if summary.min_new_until and eos_id in token_list:
        token_list = _hold_back_eos(state, logits, tokens, token_list, eos_id)
    processed_rows = (state.active & state.params.needs_processing).nonzero()[0] if summary.processing else _NO_ROWS
    processed = None
    if processed_rows.size:
        processed = _pick_processed(state, logits, tokens, processed_rows, eos_id)
        token_list = tokens.tolist()
    return PickedTokens(tokens, token_list, raw, processed_rows, processed)


def _hold_back_eos(state: RowState, logits: np.ndarray, tokens: np.ndarray, token_list: list[int], eos_id: int) -> list[int]:
    """A greedy row whose only processor is min_new_tokens keeps the in-graph argmax unless that is the end
    token before its minimum: then its argmax without the end token (the benchmark forces every length this
    way, with no per-step processing). Writes `tokens`; returns them as Python ints."""
    steps = state.steps
    too_early = [i for i, until in state.summary.min_new_until if steps < until and token_list[i] == eos_id]
    if not too_early:
        return token_list
    x = logits[too_early]  # a copy (fancy indexing); float32 widened to float64 would not change the argmax
    x[:, eos_id] = -np.inf
    tokens[too_early] = greedy_tokens(x)
    return tokens.tolist()


def _pick_processed(state: RowState, logits: np.ndarray, tokens: np.ndarray, rows: np.ndarray, eos_id: int) -> np.ndarray:
    """Process the logits of `rows` and pick their tokens into `tokens`: the argmax for greedy rows, one
    uniform per sampled row. Returns the processed logits [len(rows), V] (beam searches with penalties read them)."""
    params = state.params.take(rows)
    counts = state.counts[rows] if state.penalised else None
    processed = process_logits(logits[rows], params, counts, state.n_generated[rows], eos_id)
    greedy = params.mode == GREEDY
    if greedy.any():
        tokens[rows[greedy]] = greedy_tokens(processed[greedy])
    sampled = params.mode == SAMPLE
    if sampled.any():
        sampled_rows = rows[sampled]
        tokens[sampled_rows] = sample_rows(processed[sampled], draw_uniforms([state.rows[i].rng for i in sampled_rows]))
    return processed


def advance_rows(
    state: RowState, picked: PickedTokens, eos_id: int, decode
) -> tuple[list[StepResult], list[Row], list[Generation], list[Generation]]:
    """Append each picked token to its row (rows of a beam search are left to their search) and stop the rows
    that end: the end token, the length limit or a stop sequence. Returns (results, leaving, done, searches):
    a StepResult per token of a streaming generation, the rows that stopped, the generations of several rows
    whose last row stopped (their hypotheses are ranked by report_finished), and the beam searches."""
    results: list[StepResult] = []
    leaving: list[Row] = []
    done: list[Generation] = []
    searches: list[Generation] = []
    rows, raw, token_list = state.rows, picked.raw, picked.token_list
    wants_logprob = state.params.logprobs.tolist() if raw is not None else None
    for i in state.summary.active_rows:
        row = rows[i]
        gen = row.generation
        if gen.search is not None:
            if row.index == 0:
                searches.append(gen)
            continue
        options = gen.options
        streams = options.streams
        tok = token_list[i]
        lp = float(raw[i, tok]) if wants_logprob and wants_logprob[i] else None  # only where asked for: the same alone or batched
        top = top_tokens(raw[i], options.top_n_tokens) if options.top_n_tokens else None
        if tok == eos_id:
            row.finish_reason, row.eos_logprob = "eos_token", lp
            leaving.append(row)
            if streams:
                finish(gen, decode)
                results.append(StepResult(gen, tok, "", lp, "eos_token", True, top))
            elif all(r.finish_reason is not None for r in gen.rows):
                done.append(gen)
            continue
        token_ids = row.token_ids
        token_ids.append(tok)
        if lp is not None:
            row.logprobs.append(lp)
        old = row.text
        if (streams and options.token_text) or options.stop:
            row.text = decode(token_ids)
        stop, reason = gen.stopping(len(token_ids), old, row.text)
        if stop:
            row.finish_reason = reason
            leaving.append(row)
        if streams:
            if stop:
                finish(gen, decode)
            results.append(StepResult(gen, tok, row.text[len(old) :], lp, reason, False, top))
        elif stop and all(r.finish_reason is not None for r in gen.rows):
            done.append(gen)
    return results, leaving, done, searches


def advance_searches(
    state: RowState,
    picked: PickedTokens,
    searches: list[Generation],
    done: list[Generation],
    leaving: list[Row],
    eos_id: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Every beam search takes its step: the searches of one width choose their candidates together
    (update_searches), their rows' tokens become their beams', and a search that ended joins `done` with its
    rows in `leaving`. Returns (dest, src), the rows that continue from another row's cache (None: none moves),
    after gathering `state`'s per-row arrays the same way."""
    tokens = picked.tokens
    moved: list[tuple[np.ndarray, np.ndarray]] = []  # (slots, parent slots) of the searches that go on, by width
    for group in _searches_by_width(state, picked, searches, eos_id).values():
        gens = [g for g, *_ in group]
        all_slots = np.array([sl for _, sl, _, _ in group], dtype=np.int64)  # [n, W]
        shared = group[0][2]
        if all(dist is shared for _, _, dist, _ in group):  # one distribution: gathered for all at once
            search_lp = shared[np.array([r for *_, r in group], dtype=np.int64)]
        else:
            search_lp = np.stack([dist[r] for *_, dist, r in group])
        parents, beam_tokens = update_searches([g.search for g in gens], search_lp, picked.raw[all_slots])
        src = all_slots[np.arange(len(gens))[:, None], parents]
        going_on = [not g.search.done for g in gens]
        if not all(going_on):
            for g, goes_on in zip(gens, going_on):
                if not goes_on:
                    done.append(g)
                    leaving.extend(g.rows)
            all_slots, src, beam_tokens = all_slots[going_on], src[going_on], beam_tokens[going_on]
        tokens[all_slots] = beam_tokens  # the rows of each search that goes on follow its beams
        moved.append((all_slots.ravel(), src.ravel()))
    if not moved:
        return None
    # Every search's rows in one gather: searches own disjoint rows, so this equals one gather per search,
    # and the cache's arrays are gathered once per step, not once per search (32 searches: 192 copies).
    # A beam that continues from its own row keeps its cache where it is.
    dest, src = (np.concatenate(a) for a in zip(*moved)) if len(moved) > 1 else moved[0]
    moves = dest != src
    if not moves.any():
        return None
    dest, src = dest[moves], src[moves]
    state.gather(dest, src)
    return dest, src


def _searches_by_width(
    state: RowState, picked: PickedTokens, searches: list[Generation], eos_id: int
) -> dict[int, list[tuple[Generation, list[int], np.ndarray, list[int] | np.ndarray]]]:
    """Each search's slots and which rows of which batch-wide log-probabilities it searches, grouped by width:
    the model's own; before min_new_tokens, renormalised without the end token; with penalties, the processed
    ones. Each distribution is computed once for the batch, row-wise (so each row as alone), not once per search.
    A search's rows joined together and share their settings: its first row speaks for them all."""
    raw, processed_rows = picked.raw, picked.processed_rows
    processed_index = np.full(len(state.rows), -1, dtype=np.int64)  # a row's index among processed_rows, or -1
    processed_index[processed_rows] = np.arange(processed_rows.size)
    is_processed = (processed_index >= 0).tolist() if processed_rows.size else None
    steps, ends_from = state.steps, state.summary.ends_from
    processed_lp = None  # log-probabilities of the processed rows, for searches with penalties
    raw_without_eos = None  # the model's log-probabilities renormalised without the end token
    by_width: dict[int, list[tuple[Generation, list[int], np.ndarray, list[int] | np.ndarray]]] = {}
    for gen in searches:
        slots = [r.slot for r in gen.rows]
        first = slots[0]
        if is_processed is not None and is_processed[first]:
            if processed_lp is None:
                processed_lp = log_softmax(picked.processed)
            dist, dist_rows = processed_lp, processed_index[slots]
        elif steps < ends_from[first]:
            if raw_without_eos is None:
                raw_without_eos = raw.copy()
                raw_without_eos[:, eos_id] = -np.inf
                raw_without_eos = log_softmax(raw_without_eos)
            dist, dist_rows = raw_without_eos, slots
        else:
            dist, dist_rows = raw, slots
        by_width.setdefault(len(slots), []).append((gen, slots, dist, dist_rows))
    return by_width


def report_finished(done: list[Generation], results: list[StepResult], eos_id: int, decode) -> None:
    """Rank the hypotheses of each generation of several rows that finished this step, and report it in
    `results` with its best hypothesis' last token."""
    for gen in done:
        finish(gen, decode)
        best = gen.hypotheses[0]
        if best.finish_reason == "eos_token":
            last, lp = eos_id, best.eos_logprob
        else:
            last = best.token_ids[-1] if best.token_ids else eos_id
            lp = best.logprobs[-1] if best.logprobs else None
        results.append(StepResult(gen, last, "", lp, gen.finish_reason, last == eos_id))


def finish(gen: Generation, decode) -> None:
    """A generation is complete: its ranked hypotheses (texts decoded once here) and its finish reason."""
    if gen.search is not None:
        hyps = gen.search.finalize()
    else:
        hyps = rank([r.hypothesis() for r in gen.rows])[: gen.options.n_best]
    for h in hyps:
        if not h.text and h.token_ids:
            h.text = decode(h.token_ids)
    gen.hypotheses = hyps
    gen.finish_reason = hyps[0].finish_reason
