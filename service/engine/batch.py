"""The batch of a v1 decoder (`kv_cache: "concat"`): the rows decoding together and their KV cache, one kind of
the batch contract (service/engine/contract.py). It makes the decoder call itself (`run`).

Cache layout of an ActiveBatch (B rows, P past slots, S source slots):
- self-attention cache `past.{i}.decoder.key/value` [B, H, P, Dh] is RIGHT-aligned:
  every row writes its newest token into the same last slot at every step, so
  a row that joined later (shorter real past) has 0-filled slots on its LEFT,
  marked 0 in `decoder_attention_mask` [B, P+1]; `position_ids` [B, 1] carry
  each row's own position. When rows leave, leading slots that no remaining row
  uses are trimmed, so P is always the longest real past in the batch.
- cross-attention K/V [B, H, S, Dh] are LEFT-aligned (as the encoder wrote them),
  padded on the right to the longest source, with `encoder_attention_bias`
  [B, 1, 1, S] = -1e9 on the padding.
Padding keys get a -1e9 bias, so their softmax weight is exactly 0 in float32:
batching does not change what a row computes.

Between steps the cache stays in ONNX Runtime values: each step's `present` outputs are
the next step's `past` inputs without a numpy round trip (on CPU fed as they are to the one
`run_with_ort_values` call of the step, through `feeds`; on CUDA bound through IOBinding, so
they stay on the GPU). A leaving row leaves a free slot that the next joining row fills in
place; only a compaction (too many free slots, a longer source, or CUDA) rebuilds the cache
through numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from service.engine.bundle import BundleError
from service.engine.contract import BufferPool, DecodeBatch, DecoderSpec, EncodedSource
from service.engine.names import (
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    NEG_INF,
    POSITION_IDS,
    past_names,
)
from service.engine.rows import Generation, Row, RowState
from service.engine.step import StepChoice


class ActiveBatch(DecodeBatch):
    """The rows decoding together over a v1 decoder and their cache (layout: see the module docstring); the
    batch contract's v1 kind (service/engine/contract.py).

    Array row i holds `rows[i]`, or None for a free slot: a row that left stays in the arrays
    (it computes for nothing, masked, its position frozen) until a joining row takes its slot
    in place or the batch is compacted. Filling a slot writes only that row (CPU: the numpy
    buffers share memory with the bound OrtValues), where a rebuild copies the whole cache;
    a busy server replaces rows at nearly every step, so this is what keeps joins cheap.

    Per row it also keeps what token choice reads, as arrays: the processor parameters
    (`params`), the generated-token counts for the penalties, and how many tokens it generated.
    """

    # Compact (rebuild) when more than this share of the computed rows is free, or when this
    # share of the self-attention slots (at least MIN_DEAD_SLOTS) lies left of every live row.
    MAX_FREE_SHARE = 0.25
    MAX_DEAD_SLOT_SHARE = 0.5
    MIN_DEAD_SLOTS = 8

    KV_CACHE = "concat"

    def __init__(self, decoder: DecoderSpec, pool: BufferPool, run: Callable):
        """`run`: the adapter's `run_with_values` (the engine's `run_decoder`, which a profiler may wrap). The
        pool is not used: a v1 cache is made anew as it grows."""
        layout = decoder.layout
        self.layout = layout
        self.session = decoder.session
        self.values = decoder.values
        self.on_cpu = decoder.device == "cpu"
        self.device = decoder.device
        self.run_decoder = run
        self.output_names = decoder.output_names
        self.cache_outputs = range(1, 1 + 2 * layout.n_layers)  # the present self-attention cache among the outputs
        self.next_token_output = len(decoder.output_names) - 1 if decoder.has_next_token else None
        # a device (CUDA): the decoder's IOBinding keeps the cache on the device between steps
        self.binding = None if self.on_cpu else decoder.session.io_binding()
        self.past_names = past_names(layout.n_layers, DECODER)
        self.cross_names = past_names(layout.n_layers, ENCODER)
        self.feeds: dict[str, object] = {}  # CPU: the decoder call's inputs (C OrtValues), see bind_static
        self._reset()

    @classmethod
    def load_error(cls, decoder_path: Path, variant: str, reason: str) -> Exception:
        return BundleError(f"{decoder_path.parent}: ONNX Runtime cannot load variant {variant!r}: {reason}")

    def _reset(self) -> None:
        e = self.layout
        self.state = RowState(e.vocab_size)  # who is in each row, and what token choice reads per row
        self.past: list = []  # 2L x [B, H, P, Dh] OrtValues (CPU: ONNX Runtime's C values, see OrtValues.input)
        self.cross_np: list[np.ndarray] = [np.zeros((0, e.n_heads, 0, e.head_dim), e.kv_dtype)] * (2 * e.n_layers)
        self.bias = np.zeros((0, 1, 1, 0), e.bias_dtype)  # [B, 1, 1, S]
        self.mask = np.zeros((0, 0), np.int64)  # [B, P]
        self.input_ids = np.zeros((0, 1), np.int64)  # [B, 1] the token each row feeds next
        self.positions = np.zeros((0, 1), np.int64)  # [B, 1] that token's position
        self.live = np.zeros((0, 1), np.int64)  # [B, 1] 1 for a row in use, 0 for a free slot
        self.new_slot = np.ones((0, 1), np.int64)  # [B, 1] the mask's column for each step's new slot (step_inputs)
        self.source_lens = np.zeros((0,), np.int64)
        self.n_live = 0  # rows in use (live.sum(), kept as a count: the decode loop asks every step)
        self.dirty = True
        self.compaction_due = False

    def _past_numpy(self) -> list[np.ndarray]:
        e = self.layout
        if not self.past:
            return [np.zeros((len(self.rows), e.n_heads, 0, e.head_dim), e.kv_dtype)] * (2 * e.n_layers)
        return [v.numpy() for v in self.past]

    def _set(self, past: list[np.ndarray], cross: list[np.ndarray]) -> None:
        self.past_np = [np.ascontiguousarray(p) for p in past]  # kept alive: OrtValues may share their memory
        self.past = [self.values.input(p) for p in self.past_np]
        self.cross_np = [np.ascontiguousarray(c) for c in cross]
        self.dirty = True

    def bind_static(self) -> None:
        """Bind what changes only with a rebuild: cross K/V, bias, and the id/position buffers.
        On CPU they go into `feeds`, the decoder call's inputs, as OrtValues sharing the numpy
        buffers' memory (the arrays stay referenced here), so in-place updates need no rebinding."""
        values = self.values
        if self.on_cpu:
            arrays = [*self.cross_np, self.bias, self.input_ids, self.positions]
            names = [*self.cross_names, ENCODER_ATTENTION_BIAS, INPUT_IDS, POSITION_IDS]
            self.feeds = {name: values.input(a) for name, a in zip(names, arrays)}
        else:
            binding = self.binding
            self.cross_values = [values.value(c) for c in self.cross_np]
            for name, value in zip(self.cross_names, self.cross_values):
                binding.bind_ortvalue_input(name, value)
            self.bias_value = values.value(self.bias)
            binding.bind_ortvalue_input(ENCODER_ATTENTION_BIAS, self.bias_value)
        self.dirty = False

    def _next_mask(self) -> np.ndarray:
        """Before a step: compact if due, grow the mask by the step's slot, bind what a rebuild changed."""
        if self.compaction_due:
            self.compact_if_wasteful()
        # The mask is the only input whose shape changes every step.
        mask = np.concatenate((self.mask, self.new_slot), axis=1)  # one numpy call: each costs in the step
        self.mask = mask  # also keeps the array alive: the OrtValue made of it shares its memory
        if self.dirty:
            self.bind_static()
        return mask

    def step_inputs(self) -> dict[str, object]:
        """CPU: the decoder call's inputs for the next step, every one an OrtValue: the cache, cross K/V,
        bias, ids and positions already are (ids/positions share numpy buffers updated in place), the
        mask becomes one. One `run_with_ort_values` call takes them all, where an IOBinding costs a
        Python-to-C++ call per bound name and per output (docs/BENCHMARKS.md, the engine's Python per step)."""
        mask = self._next_mask()  # first: a rebuild makes a new `feeds`
        feeds = self.feeds
        feeds[DECODER_ATTENTION_MASK] = self.values.input(mask)
        feeds.update(zip(self.past_names, self.past))
        return feeds

    def bind_step_inputs(self):
        """A device: bind the next step's inputs to the IOBinding and return it. The cache stays on the
        device between steps; input_ids/position_ids/the mask are copied there, so they are bound every step."""
        mask = self._next_mask()
        binding, values = self.binding, self.values
        self.ids_value = values.value(self.input_ids)
        self.positions_value = values.value(self.positions)
        binding.bind_ortvalue_input(INPUT_IDS, self.ids_value)
        binding.bind_ortvalue_input(POSITION_IDS, self.positions_value)
        binding.bind_cpu_input(DECODER_ATTENTION_MASK, mask)
        for name, value in zip(self.past_names, self.past):
            binding.bind_ortvalue_input(name, value)
        return binding

    def run(self) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE decoder call for every row: (logits [B, V] float32, in-graph argmax [B] or None). Its `present`
        self-attention outputs stay OrtValues: the next step's past."""
        if self.on_cpu:
            outs = self.run_decoder(self.step_inputs(), self.output_names, None)
        else:  # device memory: IOBinding keeps the cache on the device between steps
            binding = self.bind_step_inputs()
            binding.clear_binding_outputs()
            for name in self.output_names:
                binding.bind_output(name, self.device)
            self.session.run_with_iobinding(binding)
            outs = binding.get_outputs()
        self.past = [outs[i] for i in self.cache_outputs]
        logits = outs[0].numpy()  # [B, V] float32
        return logits, (None if self.next_token_output is None else outs[self.next_token_output].numpy())

    def follow(self, choice: StepChoice) -> None:
        """After token choice: beams take their parents' cache, every row feeds its new token at its next
        position, and the rows that finished leave."""
        if choice.reorder is not None:
            self.reorder(*choice.reorder)
        self.input_ids[:, 0] = choice.tokens
        self.positions += self.live  # in place: the bound OrtValue sees it; free slots stay put
        if choice.leaving:
            self.free(choice.leaving)

    def free(self, rows: list[Row]) -> None:
        """Rows leave: their slots become free (masked, position frozen) until reused or compacted."""
        for q in rows:
            i = self.state.free(q)
            if i is None:
                continue
            self.live[i, 0] = 0
            self.n_live -= 1
            self.mask[i, :] = 0
            self.positions[i, 0] = 0  # frozen while free (step adds `live`): stays in the position table
        self.compaction_due = True
        if not len(self):
            self._reset()

    def add(self, gens: Sequence[Generation], sources: Sequence[EncodedSource]) -> None:
        """Generations join at a step boundary, all their rows. Joining rows take free slots in place when they
        fit (CPU); otherwise the cache is rebuilt. Whether free slots are worth a compaction is decided at the
        next step, so rows that join in between (a server removes finished rows after a step and adds waiting
        ones before the next) fill them first."""
        adding = [(q, src) for g, src in zip(gens, sources, strict=True) for q in g.rows]
        if not adding:
            return
        active = [i for i, q in enumerate(self.rows) if q is not None]
        free = [i for i, q in enumerate(self.rows) if q is None]
        fits = (
            self.on_cpu
            and bool(self.past)
            and len(adding) <= len(free)
            and all(src.length <= self.bias.shape[3] for _, src in adding)
        )
        if not fits:
            self._rebuild(active, adding)
            return
        for slot, (q, src) in zip(free, adding):
            self._fill(slot, q, src)
        self.compaction_due = True

    def compact_if_wasteful(self) -> None:
        """Called before a step runs: rebuild when free slots or dead leading self-attention
        slots cost more than a copy would (see the class constants)."""
        self.compaction_due = False
        if self._wasteful() or (not self.on_cpu and len(self) < len(self.rows)):
            self._rebuild([i for i, q in enumerate(self.rows) if q is not None], [])

    def reorder(self, dest: np.ndarray, src: np.ndarray) -> None:
        """Rows `dest` take the self-attention cache of rows `src` (beam search: each beam continues
        from its parent). Whisper's rearrange_kv_cache, on the rows of one request only: those rows
        joined together and step together, so their mask and positions are already equal."""
        if self.on_cpu:
            for a in self._past_numpy():  # views on the OrtValues: gathered in place
                a[dest] = a[src]
        else:  # device memory: round trip through numpy (beam search on CUDA pays a copy)
            past = [a.copy() for a in self._past_numpy()]
            for a in past:
                a[dest] = a[src]
            self.past_np = past
            self.past = [self.values.input(p) for p in past]

    def _fill(self, i: int, q: Row, src: EncodedSource) -> None:
        """Put a new row in free slot i, in place. Its past slots keep the old row's (finite)
        values under a zero mask, so they need no clearing; its cross K/V and bias are written."""
        s = src.length
        for j, c in enumerate(self.cross_np):
            c[i, :, :s] = src.cross[j]
        self.bias[i, 0, 0, :] = NEG_INF
        self.bias[i, 0, 0, :s] = src.bias
        self.mask[i, :] = 0
        self.input_ids[i, 0] = self.layout.bos_id
        self.positions[i, 0] = 0
        self.live[i, 0] = 1
        self.n_live += 1
        self.source_lens[i] = s
        self.state.put(i, q)

    def _wasteful(self) -> bool:
        n_rows = len(self.rows)
        n_free = n_rows - len(self)
        if n_free > self.MAX_FREE_SHARE * n_rows:
            return True
        p = self.mask.shape[1]
        used = np.flatnonzero(self.mask[self.live[:, 0] == 1].any(axis=0))
        dead = int(used[0]) if used.size else p  # slots left of every live row
        return dead >= max(self.MIN_DEAD_SLOTS, self.MAX_DEAD_SLOT_SHARE * p)

    def _rebuild(self, keep: list[int], add: list[tuple[Row, EncodedSource]]) -> None:
        """Copy the kept rows (in order) and the new ones into fresh arrays: free slots dropped,
        leading self-attention slots no kept row uses trimmed, cross width = the longest source."""
        e = self.layout
        if not keep and not add:
            self._reset()
            return
        idx = np.asarray(keep, dtype=np.int64)
        k, n = len(keep), len(keep) + len(add)
        mask = self.mask[idx]  # [k, P]
        used = np.flatnonzero(mask.any(axis=0))
        first = int(used[0]) if used.size else mask.shape[1]  # leading slots no kept row uses
        p = mask.shape[1] - first
        s = max([int(x) for x in self.source_lens[idx]] + [src.length for _, src in add])
        m = min(s, self.bias.shape[3])  # source slots carried over from the kept rows
        h, dh = e.n_heads, e.head_dim
        past = []
        for a in self._past_numpy():
            out = np.zeros((n, h, p, dh), e.kv_dtype)  # new rows: left padding only (finite, masked)
            out[:k] = a[idx, :, first:]
            past.append(out)
        cross = []
        for j, a in enumerate(self.cross_np):
            out = np.zeros((n, h, s, dh), e.kv_dtype)
            out[:k, :, :m] = a[idx, :, :m]
            for r, (_, src) in enumerate(add):
                out[k + r, :, : src.length] = src.cross[j]
            cross.append(out)
        bias = np.full((n, 1, 1, s), NEG_INF, e.bias_dtype)
        bias[:k, :, :, :m] = self.bias[idx, :, :, :m]
        for r, (_, src) in enumerate(add):
            bias[k + r, 0, 0, : src.length] = src.bias
        self.bias = bias
        self.mask = np.concatenate([mask[:, first:], np.zeros((len(add), p), np.int64)])
        self.input_ids = np.concatenate([self.input_ids[idx], np.full((len(add), 1), e.bos_id, np.int64)])
        self.positions = np.concatenate([self.positions[idx], np.zeros((len(add), 1), np.int64)])
        self.live = np.ones((n, 1), np.int64)
        self.new_slot = np.ones((n, 1), np.int64)
        self.n_live = n
        self.source_lens = np.concatenate([self.source_lens[idx], [src.length for _, src in add]]).astype(np.int64)
        self.state.take(idx, [q for q, _ in add])
        self._set(past, cross)
