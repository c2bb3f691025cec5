"""The rows of a batch: who occupies each row, and what token choice reads per row.

- `RowParams`: the processor parameters as one vector per row (the columns of one structured array), so a
  step with rows of different settings is processed with array operations.
- `Row` (a single answer, a best_of candidate or a beam) and `Generation` (one request's rows, its search,
  and once finished its ranked hypotheses); `new_generation` makes them, seeded by the seeding rule.
- `RowState`: a batch's rows, their parameters and generated-token counts as arrays, kept beside the cache
  by every decode loop; `StepSummary`, what its active rows need from a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnserve.service.engine.beam import BeamSearch
from attnserve.service.engine.options import DecodingOptions, request_seed, row_generator
from attnserve.service.engine.stopping import Hypothesis, StoppingCriteria, length_limit

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

    def set_row(self, i: int, options: DecodingOptions) -> dict[str, object]:
        """Row i takes the options' values; returns them (what `RowFlags.of` reads)."""
        values = self.values(options)
        self.table[i] = tuple(values.values())
        return values

    def take(self, idx: np.ndarray, add: Sequence[dict[str, object]] = ()) -> RowParams:
        """The rows `idx` (in order), then one row per `values` dict in `add`."""
        # through Python tuples: numpy concatenates structured arrays field by field (20 vs 5 us)
        return RowParams(table=np.array(self.table[idx].tolist() + [tuple(v.values()) for v in add], self.DTYPE))


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
    held: bool = False  # a streamed text waits for a character's last byte (service/engine/step.py)
    finish_reason: str | None = None
    eos_logprob: float | None = None
    slot: int = -1  # its row in the batch arrays; -1 when not in a batch

    def hypothesis(self) -> Hypothesis:
        reason = self.finish_reason or "length"
        return Hypothesis(list(self.token_ids), list(self.logprobs), reason, self.eos_logprob, self.seed, self.index, self.text)


@dataclass(eq=False)
class Generation:
    """One request's decoding state: its rows, its search, and when done its ranked hypotheses.
    Identity, not value, makes two generations different. What its rows attend to (the encoder's output) is
    not here: the batch its rows join takes it (service/engine/contract.py, `EncodedSource`)."""

    source_ids: list[int]
    options: DecodingOptions
    max_new_tokens: int  # options.max_new_tokens within the model's limit and the bundle's length bound
    seed: int | None  # a sampled request's seed (picked here if none was given)
    stopping: StoppingCriteria
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


def new_generation(
    source_ids: list[int], options: DecodingOptions, length_bound: int | None, eos_id: int, decode, search=None
) -> Generation:
    """A request's decoding state with its rows, seeded by the seeding rule; `decode`: ids -> text; `search`: the
    beam search's class (None: BeamSearch), called as BeamSearch is (an imported bundle's is transformers' rule,
    service/engine/beam.py)."""
    stopping = StoppingCriteria(length_limit(options, length_bound), options.stop)
    seed = request_seed(options)
    gen = Generation(list(source_ids), options, stopping.max_new_tokens, seed, stopping)
    n_rows = options.n_rows
    for r in range(n_rows):
        gen.rows.append(Row(gen, r, seed, row_generator(seed, r, n_rows) if seed is not None else None))
    if options.beam_search:
        gen.search = (search or BeamSearch)(options.beam_width, options.n_best, eos_id, stopping, decode)
    return gen


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
        self._flags: list[RowFlags] = []  # [B] what `summary` reads of each row's settings, as Python values
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
        need nothing beyond the in-graph argmax skips every array operation of the general path. Read from the
        rows' flags in Python: rows join and leave at most steps under load, and a dozen numpy calls over the
        parameter table's columns cost several times a loop over a batch's rows."""
        if self._summary is None:
            flags = self._flags
            active_rows = [i for i, r in enumerate(self.rows) if r is not None]
            until = [(i, flags[i].min_new_tokens) for i in active_rows if flags[i].greedy_min_new]
            beams = any(flags[i].beam for i in active_rows)
            self._summary = StepSummary(
                active_rows=active_rows,
                logprobs=any(flags[i].logprobs for i in active_rows),
                processed_rows=np.array([i for i in active_rows if flags[i].processing], dtype=np.int64),
                # greedy rows whose in-graph argmax may have to give way: with min_new_tokens, no other processing
                min_new_until=[(i, int(self.joined_at[i]) + n) for i, n in until],
                # each row's join step plus its min_new_tokens: read by beam searches only
                ends_from=(self.joined_at + self.params.min_new_tokens).tolist() if beams else [],
            )
        return self._summary

    def put(self, i: int, row: Row) -> None:
        opts = row.generation.options
        self._flags[i] = RowFlags.of(self.params.set_row(i, opts))
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
        added = [RowParams.values(q.generation.options) for q in add]
        self.params = self.params.take(keep, added)
        self.counts = np.concatenate([self.counts[keep], np.zeros((n_add, self.vocab_size), np.int32)])
        self.joined_at = np.concatenate([self.joined_at[keep], np.full(n_add, self.steps, np.int64)])
        kept = keep.tolist() if isinstance(keep, np.ndarray) else list(keep)
        self.rows = [self.rows[i] for i in kept] + list(add)
        self._flags = [self._flags[i] for i in kept] + [RowFlags.of(v) for v in added]
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
        """Rows `dest` continue from rows `src` (beams from their parents). The token counts only where a penalty reads
        them: `advance` keeps them only then, and a row that joins starts its own."""
        if self.penalised:
            self.counts[dest] = self.counts[src]
        self.joined_at[dest] = self.joined_at[src]

    def advance(self, tokens: np.ndarray) -> None:
        """After a step: every active row counts its token (per token id only where a penalty reads it)."""
        if self.penalised:
            idx = np.flatnonzero(self.active)
            self.counts[idx, tokens[idx]] += 1
        self.steps += 1


@dataclass(frozen=True, slots=True)
class RowFlags:
    """What a step's summary reads of one row's settings (the same as the parameter table's columns say)."""

    logprobs: bool  # its raw log-probabilities are read (reported, or ranking candidates)
    # picked from processed logits: sampled, or with a penalty (min_new_tokens alone is handled on the in-graph
    # argmax or, for beams, on the raw log-probabilities: pick_tokens, _searches_by_width)
    processing: bool
    min_new_tokens: int
    greedy_min_new: bool  # greedy with min_new_tokens and nothing else: the in-graph argmax unless it is the end token
    beam: bool

    @staticmethod
    def of(v: dict[str, object]) -> RowFlags:
        """From a row's `RowParams.values`."""
        processing = (
            v["mode"] == SAMPLE or v["repetition_penalty"] != 1.0 or v["frequency_penalty"] != 0.0 or v["presence_penalty"] != 0.0
        )
        greedy_min_new = v["min_new_tokens"] > 0 and v["mode"] == GREEDY and not processing
        return RowFlags(bool(v["logprobs"]), processing, int(v["min_new_tokens"]), greedy_min_new, v["mode"] == BEAM)


@dataclass(frozen=True)
class StepSummary:
    """The active rows, whether any of them reports log-probabilities, which have their logits processed, and
    which greedy rows have no processor but min_new_tokens (they keep the in-graph argmax unless it is
    the end token)."""

    active_rows: list[int]
    logprobs: bool
    processed_rows: np.ndarray  # [R] int64, in row order
    min_new_until: list[tuple[int, int]]  # (row, the step count from which its end token may be chosen)
    ends_from: list[int]  # every row's step count from which its end token may be chosen (free slots: meaningless)
