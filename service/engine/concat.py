"""`ConcatSlotBatch`: the batch contract's v1 kind (service/engine/contract.py), stepping a v1 decoder (`kv_cache:
"concat"`) over SlotBatch's slots (service/engine/slots.py), with its rows, joins, compaction and beam reorder.

The v1 graph takes its past as an input [n, H, P, Dh] and returns present = concat(past, new) [n, H, P+1, Dh]. Each
step feeds the slots' first P positions (P = the longest past among the n rows), with `decoder_attention_mask`
[n, P+1] = 1 below each row's length and on the new column P; position_ids are the rows' own. Then each row's new
K/V (present's column P) is written at its own position in its slot, where a v2 step writes it, so slots read alike
whichever graph steps them. Positions between a row's length and P hold finite leftovers under a 0 mask (weight
exactly 0 after the softmax).

Every input and output is bound by address (IOBinding), as a v2 step binds them: the past into scratch buffers,
present into others, logits and the in-graph argmax into the batch's own. A value ONNX Runtime returns would be
copied out whole by `.numpy()`, the [n, V] logits and every present, which at 32 rows of a 58k vocabulary cost a
step a fifth of its time. The past is a copy of each slot's first P positions (a slot is [Pmax] long, so its prefix
is not contiguous), except where the step before left it ready: when every live row stood at the same position then
and stands one further now (no row joined), and nothing moved rows' caches since (a compaction, a beam reorder),
that step's present (its first n rows, when rows above left) is this step's past, and the scratch sets alternate.
A batch whose rows started together (offline work, one request's candidates) copies its past once.

Its buffers are on the host whatever the provider: on CUDA, ONNX Runtime copies the fed past to the device and
present back each step (a v1 graph's step moves its whole cache anyway)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.service.engine.bundle import BundleError
from attnserve.service.engine.contract import BufferPool, DecoderSpec
from attnserve.service.engine.names import (
    DECODER_ATTENTION_MASK,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEXT_TOKEN,
    POSITION_IDS,
)
from attnserve.service.engine.runtime import StepCalls
from attnserve.service.engine.slots import SlotBatch


class ScratchSet:
    """2L flat buffers, each viewed as one [n, H, P, Dh] array a step feeds or receives; grown by doubling."""

    def __init__(self, count: int, dtype):
        self.count, self.dtype = count, dtype
        self.flat = [np.empty(0, dtype) for _ in range(count)]

    def views(self, shape: tuple[int, int, int, int]) -> list[np.ndarray]:
        size = int(np.prod(shape))
        if size > self.flat[0].size:
            grown = max(size, 2 * self.flat[0].size)
            self.flat = [np.empty(grown, self.dtype) for _ in range(self.count)]
        return [f[:size].reshape(shape) for f in self.flat]


class ConcatSlotBatch(SlotBatch):
    """The same slots, rows, joins, compaction and beam reorder as SlotBatch, stepping a v1 decoder: the fp32
    reference graph, served only when asked for by name, when a v2 variant cannot load here, or for a bundle that has
    no v2 variant (an imported checkpoint's). The module docstring says how a step feeds it."""

    KV_CACHE = "concat"
    DISABLED_OPTIMIZERS: list[str] = []

    def __init__(self, decoder: DecoderSpec, pool: BufferPool, run: Callable):
        """`run`: the adapter's `run_with_binding` (the engine's `run_decoder`, which a profiler may wrap)."""
        super().__init__(dataclasses.replace(decoder, device="cpu"), pool, run)
        self.output_names = decoder.output_names  # logits, present self-attention (2L), next_token when present
        e = self.layout
        self.scratch = (ScratchSet(2 * e.n_layers, e.kv_dtype), ScratchSet(2 * e.n_layers, e.kv_dtype))
        self.ready = None  # (n, P+1, cache_moves, scratch set, present) of the last step, when its live rows were in step

    @classmethod
    def step_call(cls, calls: StepCalls) -> Callable:
        return calls.run_with_binding  # one call over the buffers bound for this step

    @classmethod
    def load_error(cls, decoder_path: Path, variant: str, reason: str) -> Exception:
        return BundleError(f"{decoder_path.parent}: ONNX Runtime cannot load variant {variant!r}: {reason}")

    @classmethod
    def check_decoder(cls, session: ort.InferenceSession, bundle, variant: str, use_cuda: bool) -> None:
        return None  # a v1 decoder needs no check beyond loading

    def run(self) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE v1 decoder call on the first n rows: (logits [n, V], in-graph argmax [n] or None). Both are views of
        the batch's output buffers, valid until the next step."""
        if 2 * (self.n - self.n_live) >= self.n:
            self._compact()
        n, e = self.n, self.layout
        if self.bound != n:  # the views `follow` writes through and the step's outputs
            self.ids_view, self.positions_view, self.live_view = self.input_ids[:n, 0], self.positions[:n], self.live[:n]
            self.logits_view = self.logits[:n]
            self.next_view = self.next_token[:n] if self.has_next_token else None
            self.row_index = np.arange(n)
            self.bound = n
        lengths = self.positions[:n, 0]
        p = int(lengths.max())
        # a free slot's row is masked whole but for its own new column: only the live rows' pasts must be present's
        in_step = bool((lengths[self.live[:n, 0] == 1] == p).all())
        past, taken = self._past(n, p, in_step)
        present = self.scratch[1 - taken].views((n, e.n_heads, p + 1, e.head_dim))
        mask = np.ones((n, p + 1), np.int64)
        mask[:, :p] = np.arange(p) < lengths[:, None]
        positions = self.positions[:n].astype(np.int64)
        self._bind_step(n, p, past, present, mask, positions)
        self.run_binding(self.step_calls.binding_handle(self.binding), None)
        rows = self.row_index
        for buf, new in zip(self.cache, present):
            buf[rows, :, lengths] = new[:, :, p]  # each row's new K/V at its own position
        self.ready = (n, p + 1, self.cache_moves, 1 - taken, present) if in_step else None
        return self.logits_view, self.next_view

    def _past(self, n: int, p: int, in_step: bool) -> tuple[list[np.ndarray], int]:
        """The [n, H, p, Dh] past of every layer and K/V, and the scratch set it is in: the last step's present (its
        first n rows) when that is exactly it (module docstring), else the slots' first p positions copied."""
        ready = self.ready
        if in_step and ready is not None and n <= ready[0] and ready[1:3] == (p, self.cache_moves):
            return (ready[4] if n == ready[0] else [a[:n] for a in ready[4]]), ready[3]
        e = self.layout
        past = self.scratch[0].views((n, e.n_heads, p, e.head_dim))
        for dst, buf in zip(past, self.cache):
            np.copyto(dst, buf[:n, :, :p])
        return past, 0

    def _bind_step(self, n: int, p: int, past: list, present: list, mask: np.ndarray, positions: np.ndarray) -> None:
        """Bind this step's buffers by address; `mask` and `positions` live until the call returns (the caller's)."""
        bind_input, bind_output, e = self.bind_host_input, self.bind_host_output, self.layout
        dtype, w = e.kv_dtype, self.width
        bind_input(INPUT_IDS, np.int64, [n, 1], self.ids_ptr)
        bind_input(POSITION_IDS, np.int64, [n, 1], positions.ctypes.data)
        bind_input(DECODER_ATTENTION_MASK, np.int64, [n, p + 1], mask.ctypes.data)
        bind_input(ENCODER_ATTENTION_BIAS, e.bias_dtype, [n, 1, 1, w], self.bias_ptr)
        for name, ptr in zip(self.cross_names, self.cross_ptrs):
            bind_input(name, dtype, [n, e.n_heads, w, e.head_dim], ptr)
        for name, a in zip(self.past_names, past):
            bind_input(name, dtype, list(a.shape), a.ctypes.data)
        for name, a in zip(self.present_names, present):
            bind_output(name, dtype, list(a.shape), a.ctypes.data)
        bind_output(LOGITS, np.float32, [n, e.vocab_size], self.logits_ptr)
        if self.has_next_token:
            bind_output(NEXT_TOKEN, np.int64, [n], self.next_token_ptr)
