"""The batch contract: what the engine, the scheduler and teacher forcing call on a batch of decoding rows,
whatever cache kind the served variant has.

One batch implements it, `SlotBatch` (service/engine/slots.py): each row's cache in a slot of the batch's buffers,
which a v2 decoder (`kv_cache: "in_place"`) writes in place; its subclass `ConcatSlotBatch` steps the v1 reference
graph (`"concat"`: past in, past + the new position out) over the same slots, so joins, compaction and the beam
reorder are written once. The engine picks the kind once, when it loads the variant, makes every batch of it
(`Engine.new_batch`) and never asks which kind it holds again.

At a step boundary, in this order:

    batch.remove(gens)             the rows of these generations leave (finished or cancelled)
    batch.add(gens, sources)       these generations join, all their rows, each with its source's encoder output
    logits, argmax = batch.run()   ONE decoder call: every row feeds the token it was given (a new row: the start token)
    batch.follow(choice)           after token choice: beams take their parents' cache, every row is given its
                                   chosen token, and the rows that finished leave
    batch.feed(tokens, leaving)    teacher forcing, in place of `follow`: every row is given its target's token

So a teacher-forced step (service/engine/scoring.py) is `run()` over the tokens the last `feed` gave.

What a batch owns and what it is lent:
- it owns its rows: who sits in each (`rows`, `state`: the `RowState` token choice reads) and everything its
  decoder call reads per row: the self-attention cache, and the cross-attention K/V and encoder bias of each
  row's source (`EncodedSource`, handed over by `add`; a generation record carries none of it);
- it is lent, at construction, what the engine owns: the decoder (`DecoderSpec`) and the one `BufferPool` of
  self-attention buffers, which it changes only through the pool's own calls. A batch changes no engine state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from attnserve.service.engine.rows import Generation, Row, RowState
from attnserve.service.engine.runtime import OrtValues, StepCalls
from attnserve.service.engine.step import StepChoice

POOLED_BUFFER_SETS = 1  # self-attention buffer sets an engine keeps from emptied batches


class KernelsMissing(Exception):
    """A decoder this ONNX Runtime cannot run (a contrib kernel missing on this provider): the engine falls back
    to the variant the bundle names, or stops. One line."""


@dataclass(frozen=True)
class CacheLayout:
    """What the batch's arrays look like for one decoder graph: its cache shapes and dtypes, and the
    token a joining row feeds first."""

    n_layers: int
    n_heads: int
    head_dim: int
    kv_dtype: type  # the caches' numpy dtype
    bias_dtype: type  # encoder_attention_bias's
    bos_id: int
    vocab_size: int


@dataclass(frozen=True)
class DecoderSpec:
    """The engine's decoder as a batch sees it, made once at load: the session, the cache layout, where it runs,
    and the step's calls through service/engine/runtime.py's adapter."""

    session: ort.InferenceSession
    layout: CacheLayout
    max_target_len: int
    device: str  # "cpu" or "cuda"
    calls: StepCalls
    values: OrtValues  # makes a v1 step's feeds: OrtValues sharing host arrays (ONNX Runtime copies them to `device`)
    output_names: list[str]  # logits, the present self-attention cache, next_token when the graph has it
    has_next_token: bool  # the graph computes the argmax (next_token)


@dataclass(frozen=True)
class EncodedSource:
    """One source's encoder output, what its rows attend to: the cross-attention K/V, 2L x [H, S, Dh] (key then
    value per layer), and the encoder bias [S] (0 on its tokens). A request's rows share it: the encoder ran once."""

    cross: list[np.ndarray]
    bias: np.ndarray

    @property
    def length(self) -> int:
        return int(self.bias.shape[-1])


class BufferPool:
    """Self-attention buffer sets that emptied batches gave back, for the next batch to take before allocating: a
    batch that empties and fills again, or the next batch, reuses them instead of faulting in new pages. The
    engine owns one and lends it to every batch it makes; batches change it only through `give` and `take`."""

    def __init__(self, keep: int = POOLED_BUFFER_SETS):
        self.keep = keep
        self._sets: list[list] = []  # newest first

    def __len__(self) -> int:
        return len(self._sets)

    def give(self, buffers: list) -> None:
        """An emptied batch's buffer set (one array per layer and K/V): kept, newest first, up to `keep` sets."""
        self._sets[:] = [buffers, *self._sets][: self.keep]

    def take(self, rows: int) -> list | None:
        """A kept set with room for at least `rows` rows (the first that fits), or None."""
        for i, buffers in enumerate(self._sets):
            if buffers[0].shape[0] >= rows:
                return self._sets.pop(i)
        return None


class DecodeBatch(ABC):
    """The rows decoding together over one decoder and their cache (the contract: see the module docstring)."""

    # the kv_cache layout (bundle.json `variants.<name>.kv_cache`) this kind serves
    KV_CACHE: str
    # ONNX Runtime graph optimisations the kind's decoder session is made without
    DISABLED_OPTIMIZERS: list[str] = []

    state: RowState  # who is in each row, and what token choice reads per row
    n_live: int  # rows in use

    @abstractmethod
    def __init__(self, decoder: DecoderSpec, pool: BufferPool, run: Callable):
        """`run`: the decoder's step call (the engine's `run_decoder`, which a profiler may wrap)."""

    # ---- loading: the kind's decoder session ------------------------------------------------
    @classmethod
    def step_call(cls, calls: StepCalls) -> Callable:
        """Which of the adapter's calls runs this kind's step (what the engine keeps as `run_decoder`)."""
        return calls.run_with_values

    @classmethod
    @abstractmethod
    def load_error(cls, decoder_path, variant: str, reason: str) -> Exception:
        """What to raise when ONNX Runtime cannot load the variant's graphs (`reason`: its first line)."""

    @classmethod
    def check_decoder(cls, session: ort.InferenceSession, bundle, variant: str, use_cuda: bool) -> None:
        """Raise (BundleError, or KernelsMissing to fall back) when the loaded decoder cannot serve this kind; a v1
        decoder needs no check beyond loading."""
        return None

    # ---- rows -------------------------------------------------------------------------------
    @property
    def rows(self) -> list[Row | None]:
        """The batch's rows by slot; None for a free slot."""
        return self.state.rows

    def __len__(self) -> int:
        return self.n_live

    @abstractmethod
    def add(self, gens: Sequence[Generation], sources: Sequence[EncodedSource]) -> None:
        """Join new generations (fresh from `Engine.start`), all their rows, at a step boundary; `sources[i]` is
        `gens[i]`'s encoder output."""

    def remove(self, gens: Sequence[Generation]) -> None:
        """Drop every row these generations still have in the batch (finished or cancelled)."""
        leaving = [q for g in gens for q in g.rows if q.slot >= 0]
        if leaving:
            self.free(leaving)

    @abstractmethod
    def free(self, rows: list[Row]) -> None:
        """These rows leave: their slots become free."""

    # ---- steps ------------------------------------------------------------------------------
    @abstractmethod
    def run(self) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE decoder call for every row: (logits [B, V] float32, the in-graph argmax [B] or None)."""

    @abstractmethod
    def follow(self, choice: StepChoice) -> None:
        """After token choice: beams take their parents' cache, every row feeds its new token at its next
        position, and the rows that finished leave."""

    def feed(self, tokens: np.ndarray, leaving: list[Row]) -> None:
        """Teacher forcing, after a step: every row feeds the given token [B] at its next position (no beams, no
        choice), and `leaving` rows leave."""
        self.follow(StepChoice(tokens, None, leaving, []))
