"""The batch (service/engine/contract.py): each row's cache lives in a slot. `SlotBatch` steps a v2 decoder
(`kv_cache: "in_place"`, Contract 2 version 2); `ConcatSlotBatch`
(service/engine/concat.py) steps the v1 graph over the same slots.

Buffers, allocated for `capacity` rows and grown by doubling (a copy of the rows in use, rare):
- self-attention cache `past_key_values.{i}.decoder.key/value` = `present.{i}.decoder.*`: one buffer
  [C, H, Pmax, Dh] per layer and K/V (Pmax = max_target_len), bound as both input and output, so the
  graph's GroupQueryAttention writes each row's new position in place. Row b's past is positions
  below `past_lengths[b]`; what lies beyond is never read, so a slot is reused without clearing.
- cross K/V [C, H, W, Dh] and `encoder_attention_bias` [C, 1, 1, W]: W is the longest source in the
  batch rounded up to a multiple of CROSS_KEY_MULTIPLE (4); padding keys are zeros under -1e9 (a slot remembers
  how far its last source wrote, `written`, so a row joining clears only what a longer one left there). A row
  alone gets the same rounding, which keeps its arithmetic bitwise the same in any batch. On a GPU they
  are written on the host and copied to device buffers before the first step after rows joined, so the
  other steps move only ids and positions in and logits / next_token out.
- `input_ids` [C, 1] int64; `position_ids` [C, 1] int32, of which `past_lengths` [C] is a view (one
  array: a row's position is its past length); `logits` [C, V] and `next_token` [C] as outputs.
A step runs on the first n rows, n = the highest slot in use + 1: slots that rows left are taken by the next rows
to join; when half or more of the step's slots are still free (a batch draining), the rows above them move down
into them first (`_compact`): a free slot costs the decoder what a live row costs, but a compaction (row copies
and a rebinding, 0.2-0.8 ms at 32 rows) lengthens the step for every running row, so it pays only where many
slots would compute for nothing, step after step. Every buffer is bound from its first row with n rows (IOBinding
by pointer), rebound only when n, the capacity or W changes. So a step's Python is the one `run_with_iobinding`
call, and after it the tokens and positions written in place.

Joining writes the row's slot (cross K/V, bias, id, position 0); finishing frees it. A batch that empties gives
its cache to the engine's pool and keeps its other buffers and their binding for the rows that join it next. Greedy and
sampled rows never have their cache copied; a beam step copies the cache of the rows whose parent
changed, and only their first `positions` entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.service.engine.bundle import BundleError
from attnserve.service.engine.contract import BufferPool, DecodeBatch, DecoderSpec, EncodedSource, KernelsMissing
from attnserve.service.engine.names import (
    DECODER,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEG_INF,
    NEXT_TOKEN,
    PAST_LENGTHS,
    POSITION_IDS,
    TOTAL_SEQUENCE_LENGTH,
    decoder_v2_io,
    past_names,
    present_names,
)
from attnserve.service.engine.rows import Generation, Row, RowState
from attnserve.service.engine.runtime import StepCalls
from attnserve.service.engine.step import StepChoice

# ONNX Runtime would fuse the v2 graph's Add + LayerNormalization into SkipLayerNormalization, whose CPU kernel
# measured slower: sessions of a v2 decoder are made without that fusion
V2_DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]
CROSS_KEY_MULTIPLE = 4  # source axis rounded up to this (export/graphs/v2.py proves the invariance it buys)
MIN_CAPACITY = 4
KEEP_WIDER = 8  # source keys an emptied batch keeps beyond what the rows joining it need (`SlotBatch.add`)


def padded_source_len(n: int) -> int:
    return -(-n // CROSS_KEY_MULTIPLE) * CROSS_KEY_MULTIPLE


class SlotBatch(DecodeBatch):
    """The rows decoding together over a v2 decoder, each in a slot of the batch's buffers (see the module
    docstring); the batch contract's v2 kind (service/engine/contract.py)."""

    KV_CACHE = "in_place"
    DISABLED_OPTIMIZERS = V2_DISABLED_OPTIMIZERS

    def __init__(self, decoder: DecoderSpec, pool: BufferPool, run: Callable):
        """`run`: the adapter's `run_with_binding` (the engine's `run_decoder`, which a profiler may wrap).
        `pool`: the engine's self-attention buffers that emptied batches gave back, taken before allocating."""
        self.pool = pool
        self.session = decoder.session
        self.step_calls = decoder.calls  # the engine's: `run` and the binding handle agree
        self.run_binding = run
        layout = decoder.layout
        self.layout = layout
        self.max_len = int(decoder.max_target_len)
        self.device = decoder.device
        self.past_names = past_names(layout.n_layers, DECODER)
        self.present_names = present_names(layout.n_layers, DECODER)
        self.cross_names = past_names(layout.n_layers, ENCODER)
        self.binding = decoder.session.io_binding()
        # buffers bound by address: those on the device (the cache, cross K/V, bias), and the host's (ids, positions,
        # logits), which stay on the host whatever the device
        self.bind_input, self.bind_output = self.step_calls.pointer_binders(self.binding, self.device)
        self.bind_host_input, self.bind_host_output = self.step_calls.pointer_binders(self.binding, "cpu")
        self.has_next_token = decoder.has_next_token
        self.total = np.array([self.max_len], np.int32)
        self.total_ptr = self.total.ctypes.data
        self._reset()

    # ---- loading ------------------------------------------------------------------------------
    @classmethod
    def step_call(cls, calls: StepCalls) -> Callable:
        return calls.run_with_binding  # one call over the batch's bound buffers

    @classmethod
    def load_error(cls, decoder_path: Path, variant: str, reason: str) -> Exception:
        return KernelsMissing(f"ONNX Runtime {ort.__version__} cannot load {decoder_path.name}: {reason}")

    @classmethod
    def check_decoder(cls, session: ort.InferenceSession, bundle, variant: str, use_cuda: bool) -> None:
        """The decoder has every input bundle.json records and the v2 contract names, and on a GPU runs there."""
        recorded = [i["name"] for i in bundle.decoder_io(variant).get("inputs", [])]
        needed = decoder_v2_io(bundle.n_layers)[0]
        have = {i.name for i in session.get_inputs()}
        missing = [name for name in dict.fromkeys([*recorded, *needed]) if name not in have]
        dec_path = bundle.graph_paths(variant)[1]
        if missing:
            raise BundleError(f"{dec_path}: the v2 decoder lacks input(s) {', '.join(missing)} (bundle.json io.decoder_v2)")
        if use_cuda and session.get_providers()[0] != "CUDAExecutionProvider":
            raise KernelsMissing(f"{dec_path.name} is not served by the CUDA provider here")

    def _reset(self) -> None:
        """No rows and no buffers (a new batch, or an emptied device batch): the next rows to join allocate them, or
        take a pooled cache."""
        e = self.layout
        self.state = RowState(e.vocab_size)
        self.capacity = 0
        self.width = 0
        self.written = np.zeros(0, np.int64)  # per slot: the cross K/V beyond this source position are zeros
        self.n = 0  # rows the step runs on (== len(self.state.rows))
        self.n_live = 0
        self.cache: list = []
        self.given: list | None = None  # the cache set given to the pool when the batch emptied (`_emptied`)
        self.bound = -1
        self.cache_moves = 0  # compactions and beam reorders so far: rows whose cache another row's slot now holds

    def _emptied(self) -> None:
        """The last row left. A host batch gives its self-attention cache to the pool (the next batch, or this one,
        takes it) and keeps the rest: its other buffers and their binding. Rows joining it again take the cache
        back and, when that set comes back at the same row count and a source width it keeps (`add`: the same, or up
        to KEEP_WIDER keys narrower), step without rebinding: a binding is some 20 calls into ONNX Runtime and the
        buffers a dozen allocations, which at one client every request would pay. A device batch lets everything go."""
        if self.device != "cpu":
            self._reset()
            return
        self.pool.give(self.cache)
        self.given = self.cache  # the set bound now: taken back, it needs no new addresses
        self.cache = []
        self.state = RowState(self.layout.vocab_size)
        self.n = 0
        self.n_live = 0

    def _take_back_cache(self) -> None:
        """Rows join an emptied host batch: its cache from the pool, or, if another batch took that set, a fresh
        start as a new batch makes (`_reset`, then `add` allocates or takes a pooled set)."""
        pooled = self.pool.take(self.capacity)
        if pooled is not None and pooled[0].shape[0] == self.capacity:
            if pooled is not self.given:  # another set of the same size: bound again before the next step
                self.cache_ptrs, self.bound = [buf.ctypes.data for buf in pooled], -1
            self.cache = pooled
            return
        if pooled is not None:
            self.pool.give(pooled)
        self._reset()

    # ---- buffers --------------------------------------------------------------------------
    def _allocate(self, capacity: int, width: int) -> None:
        """(Re)allocate every buffer for `capacity` rows and source width `width`, keeping the first n rows."""
        e, n = self.layout, self.n
        h, dh = e.n_heads, e.head_dim
        if not n and capacity > self.capacity:  # no rows to keep: an emptied batch's buffers will do
            pooled = self.pool.take(capacity)
            if pooled is not None:
                self.cache = pooled
                capacity = max(capacity, pooled[0].shape[0])
        cache = []
        for old in self.cache or [None] * (2 * e.n_layers):
            rows = None if old is None else old.shape[0] if self.device == "cpu" else old.shape()[0]
            if rows == capacity:  # already this size (taken from the pool, or only the source width grew)
                cache.append(old)
                continue
            if self.device == "cpu":
                buf = np.zeros((capacity, h, self.max_len, dh), e.kv_dtype)
                if old is not None:
                    buf[:n] = old[:n]
            else:  # the cache stays on the device: rows in use copied through the host when it grows (rare)
                buf = ort.OrtValue.ortvalue_from_shape_and_type((capacity, h, self.max_len, dh), e.kv_dtype, self.device, 0)
                if old is not None and n:
                    host = np.zeros((capacity, h, self.max_len, dh), e.kv_dtype)
                    host[:n] = old.numpy()[:n]
                    buf.update_inplace(host)
            cache.append(buf)
        self.cache = cache
        keep = min(width, self.width)
        cross = []
        for j in range(2 * e.n_layers):
            c = np.zeros((capacity, h, width, dh), e.kv_dtype)
            if self.width:
                c[:n, :, :keep] = self.cross[j][:n, :, :keep]
            cross.append(c)
        bias = np.full((capacity, 1, 1, width), NEG_INF, e.bias_dtype)
        written = np.zeros(capacity, np.int64)
        if self.width:
            bias[:n, :, :, :keep] = self.bias[:n, :, :, :keep]
            written[:n] = np.minimum(self.written[:n], keep)
        self.cross, self.bias, self.written = cross, bias, written
        if self.device != "cpu":  # their device copies, bound instead: a step then moves only ids and positions in
            self.cross_device = [ort.OrtValue.ortvalue_from_numpy(c, self.device, 0) for c in cross]
            self.bias_device = ort.OrtValue.ortvalue_from_numpy(bias, self.device, 0)
            self.joined = False
        grown = capacity != self.capacity
        if grown:
            ids = np.full((capacity, 1), e.bos_id, np.int64)
            positions = np.zeros((capacity, 1), np.int32)
            live = np.zeros((capacity, 1), np.int32)
            if self.capacity:
                ids[:n], positions[:n], live[:n] = self.input_ids[:n], self.positions[:n], self.live[:n]
            self.input_ids, self.positions, self.live = ids, positions, live
            self.logits = np.zeros((capacity, e.vocab_size), np.float32)
            self.next_token = np.zeros(capacity, np.int64)
        self.capacity, self.width = capacity, width
        # every buffer's address for `_bind`, read once per allocation: each `.ctypes.data` read builds a ctypes
        # object (about 2 us), and a batch binds some 25 buffers whenever its row count changes
        if self.device == "cpu":
            self.cache_ptrs = [buf.ctypes.data for buf in self.cache]
            self.cross_ptrs = [c.ctypes.data for c in self.cross]
            self.bias_ptr = self.bias.ctypes.data
        else:
            self.cache_ptrs = [buf.data_ptr() for buf in self.cache]
            self.cross_ptrs = [c.data_ptr() for c in self.cross_device]
            self.bias_ptr = self.bias_device.data_ptr()
        self.ids_ptr, self.positions_ptr = self.input_ids.ctypes.data, self.positions.ctypes.data
        self.logits_ptr, self.next_token_ptr = self.logits.ctypes.data, self.next_token.ctypes.data
        self.bound = -1  # rebind before the next step

    def _bind(self) -> None:
        """Bind the first n rows of every buffer (by address: a prefix of a C-order buffer is contiguous)."""
        bind_input, bind_output, n, e = self.bind_input, self.bind_output, self.n, self.layout
        h, dh, w = e.n_heads, e.head_dim, self.width
        cache_shape = [n, h, self.max_len, dh]
        for past, present, ptr in zip(self.past_names, self.present_names, self.cache_ptrs):
            bind_input(past, e.kv_dtype, cache_shape, ptr)
            bind_output(present, e.kv_dtype, cache_shape, ptr)
        cross_shape = [n, h, w, dh]
        for name, ptr in zip(self.cross_names, self.cross_ptrs):
            bind_input(name, e.kv_dtype, cross_shape, ptr)
        bind_input(ENCODER_ATTENTION_BIAS, e.bias_dtype, [n, 1, 1, w], self.bias_ptr)
        self._bind_host_inputs()
        self.bind_host_input(TOTAL_SEQUENCE_LENGTH, np.int32, [1], self.total_ptr)
        self.bind_host_output(LOGITS, np.float32, [n, e.vocab_size], self.logits_ptr)
        if self.has_next_token:
            self.bind_host_output(NEXT_TOKEN, np.int64, [n], self.next_token_ptr)
        self._binding = self.step_calls.binding_handle(self.binding)
        self.logits_view = self.logits[:n]
        self.next_view = self.next_token[:n] if self.has_next_token else None
        # what `follow` writes after the step, as views made once per binding, not per step
        self.ids_view, self.positions_view, self.live_view = self.input_ids[:n, 0], self.positions[:n], self.live[:n]
        self.bound = n

    def _bind_host_inputs(self) -> None:
        """The per-step inputs written in place on the host: the tokens and positions (which are also the past
        lengths). A CPU session reads them through the pointer at every run. A CUDA session does not: ONNX Runtime
        copies a host input to the device when it is bound, not when it runs, so on a GPU they are bound again
        before every step (bound once, every step after the first would re-read the first step's tokens)."""
        bind, n = self.bind_host_input, self.n
        bind(INPUT_IDS, np.int64, [n, 1], self.ids_ptr)
        bind(POSITION_IDS, np.int32, [n, 1], self.positions_ptr)
        bind(PAST_LENGTHS, np.int32, [n], self.positions_ptr)  # the same numbers

    def run(self) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE decoder call on the first n rows: (logits [n, V], in-graph argmax [n] or None). Both are views of
        the batch's output buffers, valid until the next step."""
        if 2 * (self.n - self.n_live) >= self.n:  # half the step or more would compute for free slots
            self._compact()
        if self.bound != self.n:
            self._bind()
        if self.device != "cpu" and self.joined:  # rows joined since the last step: their cross K/V and bias go over
            for dev, host in zip(self.cross_device, self.cross):
                dev.update_inplace(host)
            self.bias_device.update_inplace(self.bias)
            self.joined = False
        if self.device != "cpu":
            self._bind_host_inputs()
        self.run_binding(self._binding, None)
        return self.logits_view, self.next_view

    @property
    def past(self) -> list:
        """The self-attention buffers (past and present at once): the same objects from step to step until the
        batch grows."""
        return self.cache

    # ---- rows -----------------------------------------------------------------------------
    def add(self, gens: Sequence[Generation], sources: Sequence[EncodedSource]) -> None:
        """Generations join at a step boundary, all their rows: joining rows take the lowest free slots, then new
        slots after the last; the buffers grow (doubling) or widen only when they must."""
        adding = [(q, src) for g, src in zip(gens, sources, strict=True) for q in g.rows]
        if not adding:
            return
        if self.capacity and not self.cache:  # emptied: its cache went to the pool
            self._take_back_cache()
        free = [i for i, q in enumerate(self.rows) if q is None]
        extra = len(adding) - len(free)
        need_n = self.n + max(0, extra)
        width = padded_source_len(max(src.length for _, src in adding))
        # running rows keep their width; an emptied batch keeps its own up to KEEP_WIDER keys wider than its new rows
        # need, and narrows beyond: a wider one costs a step about 0.3 us a key at one row, narrowing about 140 us
        # (new buffers and their binding), which at one client every request of another width would pay
        if self.n or self.width - KEEP_WIDER <= width <= self.width:
            width = max(width, self.width)
        if need_n > self.capacity or width != self.width:
            capacity = max(self.capacity, MIN_CAPACITY)
            while capacity < need_n:
                capacity *= 2
            self._allocate(capacity, width)
        if extra > 0:
            self.state.take(np.arange(self.n), [q for q, _ in adding[len(free) :]])
            slots = free + list(range(self.n, need_n))
            self.n = need_n
            for i, (_, src) in zip(slots[len(free) :], adding[len(free) :]):
                self._write(i, src)
            adding = adding[: len(free)]
        for i, (q, src) in zip(free, adding):
            self.state.put(i, q)
            self._write(i, src)

    def _write(self, i: int, src: EncodedSource) -> None:
        """Slot i takes a row of source `src`: its cross K/V and bias, the start token at position 0. The cache is
        not touched: position 0 is written by the row's first step and nothing beyond its length is read."""
        s = src.length
        stale = int(self.written[i])  # a longer source's keys left in the slot, which must read as zeros again
        for j, c in enumerate(self.cross):
            c[i, :, :s] = src.cross[j]
            if stale > s:
                c[i, :, s:stale] = 0
        self.written[i] = s
        self.bias[i, 0, 0, :] = NEG_INF
        self.bias[i, 0, 0, :s] = src.bias
        self.input_ids[i, 0] = self.layout.bos_id
        self.positions[i, 0] = 0
        self.live[i, 0] = 1
        self.n_live += 1
        self.joined = True  # a device batch copies the cross K/V and bias over before its next step

    def free(self, rows: list[Row]) -> None:
        """Rows leave: their slots become free until a joining row takes them, or the rows above move down before a
        step that would run on half or more of free slots (`_compact`); free slots at the end are dropped at once."""
        for q in rows:
            i = self.state.free(q)
            if i is None:
                continue
            self.live[i, 0] = 0
            self.positions[i, 0] = 0  # stays inside the buffers (a row that hit max_target_len stands at Pmax)
            self.n_live -= 1
        if not self.n_live:
            self._emptied()
            return
        live = np.flatnonzero(self.live[: self.n, 0])
        n = int(live[-1]) + 1
        if n < self.n:
            self.state.take(np.arange(n), [])
            self.n = n

    def _compact(self) -> None:
        """The rows above the free slots move down into them, so the step runs on n_live rows. A moved row takes its
        self-attention cache (the positions it has written), cross K/V, bias, next token and position, and its row
        state; what it computes next is the same in any slot."""
        n_live = self.n_live
        live = self.live[: self.n, 0]
        dest = np.flatnonzero(live[:n_live] == 0)
        src = np.flatnonzero(live[n_live:]) + n_live  # as many live rows above n_live as free slots below it
        p = int(self.positions[src, 0].max())  # positions below a row's next one are its written cache
        if self.device == "cpu":
            for a in self.cache:
                a[dest, :, :p] = a[src, :, :p]
        else:  # device memory: a round trip through the host, as `reorder`
            for v in self.cache:
                host = v.numpy()
                host[dest, :, :p] = host[src, :, :p]
                v.update_inplace(host)
            self.joined = True  # the cross K/V and bias go over again before the step
        for c in self.cross:
            c[dest] = c[src]
        self.written[dest] = self.written[src]
        self.bias[dest] = self.bias[src]
        self.input_ids[dest] = self.input_ids[src]
        self.positions[dest] = self.positions[src]
        self.live[dest] = 1
        self.live[src] = 0
        keep = np.arange(n_live)
        keep[dest] = src
        self.state.take(keep, [])  # the rows renumbered: a moved row's slot is its new one
        self.n = n_live
        self.cache_moves += 1

    def follow(self, choice: StepChoice) -> None:
        """After token choice: beams take their parents' cache, every row feeds its new token at its next
        position, and the rows that finished leave."""
        if choice.reorder is not None:
            self.reorder(*choice.reorder)
        if self.n == 1:  # batch 1: two scalar writes cost less than two array operations right after the step
            self.ids_view[0] = choice.tokens[0]
            self.positions_view[0, 0] += self.live_view[0, 0]
        else:
            self.ids_view[:] = choice.tokens  # the views of the step that just ran (`_bind`): n cannot change in between
            self.positions_view += self.live_view  # in place: the bound buffers see it
        if choice.leaving:
            self.free(choice.leaving)

    def reorder(self, dest: np.ndarray, src: np.ndarray) -> None:
        """Rows `dest` take the self-attention cache of rows `src` (beams continue from their parents): only
        those rows, and only the positions they have written (a beam's rows share their position)."""
        p = int(self.positions[src].max()) + 1
        self.cache_moves += 1
        if self.device == "cpu":
            first = self.cache[0]
            # Rows of 16 KiB and more (a default-model row past 16 positions), where no row both gives and takes
            # (beam search's placement): copied row by row, in place, without the temporary a gather makes
            # (half the memory traffic); shorter rows cost less as one gather than as a Python loop.
            if p * first.shape[1] * first.shape[3] * first.itemsize >= 16384:
                dest_list, src_list = dest.tolist(), src.tolist()
                if set(dest_list).isdisjoint(src_list):
                    for a in self.cache:
                        for d, s in zip(dest_list, src_list):
                            a[d, :, :p] = a[s, :, :p]
                    return
            for a in self.cache:
                a[dest, :, :p] = a[src, :, :p]
        else:  # device memory: a round trip through the host
            for v in self.cache:
                host = v.numpy()
                host[dest, :, :p] = host[src, :, :p]
                v.update_inplace(host)


class RowStep:
    """One row stepping alone through a v2 decoder, padded and bound as a SlotBatch row is (so its logits are the
    ones that row gets in any batch): the explain loop's served graph (service/engine/explain.py)."""

    def __init__(self, session: ort.InferenceSession, layout, max_target_len: int):
        self.session, self.layout, self.max_len = session, layout, int(max_target_len)
        e = layout
        self.cache = [np.zeros((1, e.n_heads, self.max_len, e.head_dim), e.kv_dtype) for _ in range(2 * e.n_layers)]
        self.ids = np.zeros((1, 1), np.int64)
        self.positions = np.zeros((1, 1), np.int32)
        self.logits = np.zeros((1, e.vocab_size), np.float32)
        self.total = np.array([self.max_len], np.int32)
        self.binding = session.io_binding()
        b = self.binding
        for past, present, buf in zip(past_names(e.n_layers, DECODER), present_names(e.n_layers, DECODER), self.cache):
            b.bind_input(past, "cpu", 0, e.kv_dtype, list(buf.shape), buf.ctypes.data)
            b.bind_output(present, "cpu", 0, e.kv_dtype, list(buf.shape), buf.ctypes.data)
        b.bind_input(INPUT_IDS, "cpu", 0, np.int64, [1, 1], self.ids.ctypes.data)
        b.bind_input(POSITION_IDS, "cpu", 0, np.int32, [1, 1], self.positions.ctypes.data)
        b.bind_input(PAST_LENGTHS, "cpu", 0, np.int32, [1], self.positions.ctypes.data)
        b.bind_input(TOTAL_SEQUENCE_LENGTH, "cpu", 0, np.int32, [1], self.total.ctypes.data)
        b.bind_output(LOGITS, "cpu", 0, np.float32, [1, e.vocab_size], self.logits.ctypes.data)

    def start(self, bias: np.ndarray, cross: list[np.ndarray]) -> None:
        """A new source: its bias [S] and cross K/V [H, S, Dh] per layer and K/V, padded to a multiple of 4."""
        e, s = self.layout, bias.shape[-1]
        w = padded_source_len(s)
        self.bias = np.full((1, 1, 1, w), NEG_INF, e.bias_dtype)
        self.bias[0, 0, 0, :s] = bias
        self.cross = []
        for c in cross:
            a = np.zeros((1, e.n_heads, w, e.head_dim), e.kv_dtype)
            a[0, :, :s] = c
            self.cross.append(a)
        self.binding.bind_input(ENCODER_ATTENTION_BIAS, "cpu", 0, e.bias_dtype, [1, 1, 1, w], self.bias.ctypes.data)
        for name, a in zip(past_names(e.n_layers, ENCODER), self.cross):
            self.binding.bind_input(name, "cpu", 0, e.kv_dtype, list(a.shape), a.ctypes.data)

    def step(self, token: int, position: int) -> np.ndarray:
        """Feed `token` at `position` (= the row's past length): logits [1, V], a copy."""
        self.ids[0, 0], self.positions[0, 0] = token, position
        self.session.run_with_iobinding(self.binding)
        return self.logits.copy()
