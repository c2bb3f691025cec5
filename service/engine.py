"""The ONNX Runtime decode loop: the one place the project turns ids into ids.

Export proves parity on this loop, eval/bench/bulk generation use it, and the
service's scheduler drives its continuous-batching primitives:

    gens = engine.start([(source_ids, options), ...])  # encoder once for these sources
    batch = engine.new_batch(); batch.add(gens)         # join at a step boundary (all their rows)
    results = engine.step(batch)                        # ONE decoder call for all rows
    batch.remove([r.generation for r in results if r.finish_reason])  # cancelled ones too

Token choice, seeding and stopping are service/decoding.py's: this module runs
the graphs and keeps the batch, and calls it once per step for all rows.

A request (a `Generation`) owns one batch row, or N: its beams (beam search,
`best_of` without sampling) or its `best_of` samples. The encoder runs once per
request; its cross-attention K/V are copied into each of its rows. Rows of beam
search follow their beams: after each step `ActiveBatch.reorder` gathers their
self-attention cache by parent (Whisper's rearrange_kv_cache). Rows that finish
leave the batch at once, so a short request is never held by a long one.

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

Between steps the cache stays in ONNX Runtime values (OrtValues bound through
IOBinding): each step's `present` outputs are bound as the next step's `past`
inputs without a numpy round trip (and stay on the GPU under CUDA). A leaving row
leaves a free slot that the next joining row fills in place; only a compaction (too
many free slots, a longer source, or CUDA) rebuilds the cache through numpy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from service.bundle import BundleError, LoadedBundle
from service.decoding import (
    DecodingOptions,
    Generation,
    Hypothesis,
    InputError,
    Row,
    RowState,
    StepResult,
    choose_tokens,
    length_limit,
    new_generation,
)

NEG_INF = -1e9  # the bias value the graphs use for masked keys (never -inf)

__all__ = ["DecodingOptions", "Engine", "EngineError", "Generation", "GenerationResult", "InputError", "StepResult"]


class EngineError(RuntimeError):
    """The engine cannot start as configured (provider, threads); one line."""


@dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    finish_reason: str
    seed: int | None
    logprobs: list[float] | None
    generated_tokens: int  # token_ids plus the eos token when it ended the sequence
    hypotheses: list[Hypothesis] = field(default_factory=list)  # ranked, best first (n-best requests)

    @classmethod
    def of(cls, gen: Generation) -> GenerationResult:
        """The result of a finished generation: its best hypothesis, and all of them."""
        return cls(
            token_ids=list(gen.token_ids),
            text=gen.text,
            finish_reason=gen.finish_reason or "length",
            seed=gen.seed,
            logprobs=gen.logprobs,
            generated_tokens=gen.generated_tokens,
            hypotheses=gen.hypotheses,
        )


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup v2/v1 CPU quota."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        try:
            q = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
            p = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
            if q > 0:
                n = min(n, max(1, q // p))
        except (OSError, ValueError):
            pass
    return max(1, n)


def gpu_present() -> bool:
    """CUDA only when ONNX Runtime has the provider AND an NVIDIA device is really there;
    onnxruntime-gpu on a CPU-only machine otherwise logs loud errors and falls back."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return Path("/dev/nvidiactl").exists() or (gpus.is_dir() and any(gpus.iterdir()))


def _np_dtype(ort_type: str) -> type:
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}[ort_type]


class Engine:
    def __init__(
        self,
        bundle: LoadedBundle,
        variant: str = "auto",
        provider: str = "auto",
        threads: int | None = None,
        spin: bool = False,
    ):
        if provider not in ("auto", "cpu", "cuda"):
            raise EngineError(f"provider must be auto, cpu or cuda, not {provider!r}")
        use_cuda = provider == "cuda" or (provider == "auto" and gpu_present())
        if provider == "cuda" and not gpu_present():
            raise EngineError("provider 'cuda' requested but no GPU with ONNX Runtime's CUDA provider is available")
        self.bundle = bundle
        self.variant = bundle.resolve_variant(variant, "cuda" if use_cuda else "cpu")
        self.threads = int(threads) if threads else available_cpus()
        if self.threads < 1:
            raise EngineError(f"threads must be >= 1, got {threads}")
        enc_path, dec_path = bundle.graph_paths(self.variant)
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3  # errors only: keep CUDA fallback noise out of a CPU user's face
        # ONNX Runtime's worker threads spin between operators by default. On a shared or
        # CPU-quota'd machine that burns the cores the other threads need: with 2 threads on a
        # busy 2-core machine decoding ran 3x slower spinning (docs/BENCHMARKS.md). Off unless asked.
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "1" if spin else "0")
        self.spin = spin
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if use_cuda else ["CPUExecutionProvider"]
        try:
            self.encoder = ort.InferenceSession(str(enc_path), so, providers=providers)
            self.decoder = ort.InferenceSession(str(dec_path), so, providers=providers)
        except Exception as e:  # ONNX Runtime raises its own exception types; keep one line
            raise BundleError(f"{dec_path.parent}: ONNX Runtime cannot load variant {self.variant!r}: {e}") from None
        self.provider = self.decoder.get_providers()[0]
        self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        self.src_tokenizer = Tokenizer.from_file(str(bundle.src_tokenizer_path))
        self.tgt_tokenizer = Tokenizer.from_file(str(bundle.tgt_tokenizer_path))

        ids = bundle.special_ids
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids["pad"], ids["bos"], ids["eos"], ids["unk"]
        self.n_layers = bundle.n_layers
        self.n_heads = int(bundle.config["n_heads"])
        self.head_dim = int(bundle.config["d_model"]) // self.n_heads
        self.max_source_len = bundle.max_source_len
        self.max_target_len = bundle.max_target_len
        dec_inputs = {i.name: i for i in self.decoder.get_inputs()}
        self.kv_dtype = _np_dtype(dec_inputs["past_key_values.0.decoder.key"].type)
        self.bias_dtype = _np_dtype(dec_inputs["encoder_attention_bias"].type)
        self.past_names = [f"past_key_values.{i}.decoder.{kv}" for i in range(self.n_layers) for kv in ("key", "value")]
        self.cross_names = [f"past_key_values.{i}.encoder.{kv}" for i in range(self.n_layers) for kv in ("key", "value")]
        self.output_names = ["logits", *(f"present.{i}.decoder.{kv}" for i in range(self.n_layers) for kv in ("key", "value"))]
        self.has_next_token = "next_token" in {o.name for o in self.decoder.get_outputs()}
        if self.has_next_token:
            self.output_names.append("next_token")
        self.encoder_output_names = [o.name for o in self.encoder.get_outputs()]

        # ---- text -------------------------------------------------------------------------
        self.vocab_size = int(bundle.config["tgt_vocab_size"])
        self.special_token_ids = frozenset(ids.values())

    # ---- text -------------------------------------------------------------------------
    def encode_text(self, text: str) -> list[int]:
        """Source ids for `text`; InputError if empty, too long, or holding characters the model cannot read."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("input text is empty")
        enc = self.src_tokenizer.encode(text, add_special_tokens=False)
        unknown = [text[a:b] for tok, (a, b) in zip(enc.ids, enc.offsets) if tok == self.unk_id]
        if unknown:
            shown = ", ".join(repr(c) for c in dict.fromkeys(unknown))
            raise InputError(f"input contains text this model cannot read: {shown}; remove or replace it")
        if not enc.ids:
            raise InputError("input text has no tokens this model can read")
        if len(enc.ids) > self.max_source_len:
            raise InputError(f"input is {len(enc.ids)} tokens long; this model reads at most {self.max_source_len}")
        return list(enc.ids)

    def decode_ids(self, ids: SequenceABC[int]) -> str:
        return self.tgt_tokenizer.decode(list(ids), skip_special_tokens=True)

    def max_new_tokens_for(self, source_len: int, options: DecodingOptions) -> int:
        """The length limit of a request: what it asked for, within the bundle's bound for its source."""
        return length_limit(options, self.bundle.length_bound(source_len))

    # ---- continuous-batching primitives -----------------------------------------------
    def start(self, items: list[tuple[list[int], DecodingOptions]]) -> list[Generation]:
        """Run the encoder ONCE for these sources; return generations ready to join a batch."""
        if not items:
            return []
        for ids, opts in items:
            if not ids:
                raise InputError("input has no tokens")
            if len(ids) > self.max_source_len:
                raise InputError(f"input is {len(ids)} tokens long; this model reads at most {self.max_source_len}")
            if opts.max_new_tokens > self.max_target_len:
                raise InputError(f"max_new_tokens is {opts.max_new_tokens}; this model generates at most {self.max_target_len}")
        n, s = len(items), max(len(ids) for ids, _ in items)
        input_ids = np.full((n, s), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, s), dtype=np.int64)
        for i, (ids, _) in enumerate(items):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        bias, *kv = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": mask})  # [n,1,1,s], 2L x [n,H,s,Dh]
        gens = []
        for i, (ids, opts) in enumerate(items):
            li = len(ids)
            gen = new_generation(ids, opts, self.bundle.length_bound(li), self.eos_id, self.decode_ids)
            gen.cross = [a[i, :, :li] for a in kv]  # shared by the request's rows: the encoder ran once
            gen.bias = bias[i, 0, 0, :li]
            gens.append(gen)
        return gens

    def new_batch(self) -> ActiveBatch:
        return ActiveBatch(self)

    def _ortvalue(self, array: np.ndarray) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(array, self.device, 0)

    def run_step(self, batch: ActiveBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE decoder call for every row of the batch: (logits [B, V] float32, in-graph argmax [B] or None)."""
        if batch.compaction_due:
            batch.compact_if_wasteful()
        binding = batch.binding
        b = len(batch.rows)
        # The mask gains this step's slot; it is the only input whose shape changes every step.
        mask = np.empty((b, batch.mask.shape[1] + 1), dtype=np.int64)
        mask[:, :-1] = batch.mask
        mask[:, -1] = 1
        batch.mask = mask
        if batch.dirty:
            batch.bind_static()
        elif self.device != "cpu":
            batch.bind_step_inputs()
        binding.bind_cpu_input("decoder_attention_mask", mask)
        for name, value in zip(self.past_names, batch.past):
            binding.bind_ortvalue_input(name, value)
        binding.clear_binding_outputs()
        for name in self.output_names:
            binding.bind_output(name, self.device)
        self.decoder.run_with_iobinding(binding)
        outs = binding.get_outputs()
        batch.past = outs[1 : 1 + 2 * self.n_layers]  # stays an OrtValue: next step's past
        logits = outs[0].numpy()  # [B, V] float32 (a view on CPU)
        return logits, (outs[-1].numpy() if self.has_next_token else None)

    def step(self, batch: ActiveBatch) -> list[StepResult]:
        """ONE decoder call for every row, then token choice for every row (service/decoding.py);
        returns a StepResult per streaming generation and per generation that finished."""
        if not len(batch):
            return []
        logits, next_tokens = self.run_step(batch)
        choice = choose_tokens(batch.state, logits, next_tokens, self.eos_id, self.decode_ids)
        for dest, src in choice.reorders:  # beams continue from their parents: their caches follow
            batch.reorder(dest, src)
        batch.input_ids[:, 0] = choice.tokens
        batch.positions += batch.live  # in place: the bound OrtValue sees it; free slots stay put
        if choice.leaving:
            batch.free(choice.leaving)
        return choice.results

    # ---- convenience ------------------------------------------------------------------
    def generate(
        self,
        inputs: SequenceABC[str] | SequenceABC[list[int]],
        options: DecodingOptions | SequenceABC[DecodingOptions] | None = None,
        batch_size: int = 32,
        refill: bool = False,
        sort: bool = True,
    ) -> list[GenerationResult]:
        """Generate for every input (texts, or lists of source ids) in input order.

        refill=False: requests start together in chunks of up to `batch_size` rows (what bench measures).
        refill=True: continuous batching: a new request joins as soon as its rows fit,
        so rows of one step have different past and source lengths.
        sort=True: requests are taken shortest source first (less padding); results keep input order.
        A request of N rows (beams, best_of) counts N toward batch_size.
        """
        items = [(self.encode_text(x) if isinstance(x, str) else list(x)) for x in inputs]
        options = DecodingOptions() if options is None else options
        opts = [options] * len(items) if isinstance(options, DecodingOptions) else list(options)
        if len(opts) != len(items):
            raise InputError(f"{len(items)} inputs but {len(opts)} options")
        too_wide = [o.n_rows for o in opts if o.n_rows > batch_size]
        if too_wide:
            raise InputError(f"a request needs {too_wide[0]} rows; batch_size is {batch_size}")
        # Shorter sources together: less padding in the encoder and in cross-attention. Outputs
        # do not depend on the company a row keeps, so the order is free.
        order = sorted(range(len(items)), key=lambda i: len(items[i])) if sort else list(range(len(items)))
        gens: list[Generation | None] = [None] * len(items)
        batch = self.new_batch()
        cursor = 0
        while cursor < len(order) or len(batch):
            if cursor < len(order) and (refill or not len(batch)):
                take, rows = [], len(batch)
                while cursor < len(order) and rows + opts[order[cursor]].n_rows <= batch_size:
                    take.append(order[cursor])
                    rows += opts[order[cursor]].n_rows
                    cursor += 1
                for i, g in zip(take, self.start([(items[i], opts[i]) for i in take])):
                    gens[i] = g
                batch.add([gens[i] for i in take])
            self.step(batch)
        return [GenerationResult.of(g) for g in gens]


class ActiveBatch:
    """The rows decoding together and their cache (layout: see the module docstring).

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

    def __init__(self, engine: Engine):
        self.engine = engine
        self.binding = engine.decoder.io_binding()
        self._reset()

    def _reset(self) -> None:
        e = self.engine
        self.state = RowState(e.vocab_size)  # who is in each row, and what token choice reads per row
        self.past: list[ort.OrtValue] = []  # 2L x [B, H, P, Dh]
        self.cross_np: list[np.ndarray] = [np.zeros((0, e.n_heads, 0, e.head_dim), e.kv_dtype)] * (2 * e.n_layers)
        self.bias = np.zeros((0, 1, 1, 0), e.bias_dtype)  # [B, 1, 1, S]
        self.mask = np.zeros((0, 0), np.int64)  # [B, P]
        self.input_ids = np.zeros((0, 1), np.int64)  # [B, 1] the token each row feeds next
        self.positions = np.zeros((0, 1), np.int64)  # [B, 1] that token's position
        self.live = np.zeros((0, 1), np.int64)  # [B, 1] 1 for a row in use, 0 for a free slot
        self.source_lens = np.zeros((0,), np.int64)
        self.dirty = True
        self.compaction_due = False

    @property
    def rows(self) -> list[Row | None]:
        return self.state.rows

    @property
    def generations(self) -> list[Generation]:
        """The generations with rows in the batch, in row order."""
        return list(dict.fromkeys(r.generation for r in self.rows if r is not None))

    def __len__(self) -> int:
        return int(self.live.sum())

    def _past_numpy(self) -> list[np.ndarray]:
        e = self.engine
        if not self.past:
            return [np.zeros((len(self.rows), e.n_heads, 0, e.head_dim), e.kv_dtype)] * (2 * e.n_layers)
        return [v.numpy() for v in self.past]

    def _set(self, past: list[np.ndarray], cross: list[np.ndarray]) -> None:
        e = self.engine
        self.past_np = [np.ascontiguousarray(p) for p in past]  # kept alive: OrtValues may share their memory
        self.past = [e._ortvalue(p) for p in self.past_np]
        self.cross_np = [np.ascontiguousarray(c) for c in cross]
        self.dirty = True

    def bind_static(self) -> None:
        """Bind what changes only with a rebuild: cross K/V, bias, and the id/position buffers."""
        e, binding = self.engine, self.binding
        self.cross_values = [e._ortvalue(c) for c in self.cross_np]
        for name, value in zip(e.cross_names, self.cross_values):
            binding.bind_ortvalue_input(name, value)
        self.bias_value = e._ortvalue(self.bias)
        binding.bind_ortvalue_input("encoder_attention_bias", self.bias_value)
        self.bind_step_inputs()
        self.dirty = False

    def bind_step_inputs(self) -> None:
        """input_ids/position_ids. On CPU an OrtValue shares the numpy buffer's memory, so the
        in-place updates of each step need no rebinding; on CUDA they are copied: rebind per step."""
        e = self.engine
        self.ids_value = e._ortvalue(self.input_ids)
        self.positions_value = e._ortvalue(self.positions)
        self.binding.bind_ortvalue_input("input_ids", self.ids_value)
        self.binding.bind_ortvalue_input("position_ids", self.positions_value)

    def add(self, gens: list[Generation]) -> None:
        """Join new generations (fresh from engine.start), all their rows, at a step boundary."""
        self.update(add=gens)

    def remove(self, gens: list[Generation]) -> None:
        """Drop every row these generations still have in the batch (finished or cancelled)."""
        self.update(remove=gens)

    def free(self, rows: list[Row]) -> None:
        """Rows leave: their slots become free (masked, position frozen) until reused or compacted."""
        for q in rows:
            i = self.state.free(q)
            if i is None:
                continue
            self.live[i, 0] = 0
            self.mask[i, :] = 0
            self.positions[i, 0] = 0  # frozen while free (step adds `live`): stays in the position table
        self.compaction_due = True
        if not len(self):
            self._reset()

    def update(self, remove: list[Generation] = (), add: list[Generation] = ()) -> None:
        """Generations leave and join at a step boundary. Joining rows take free slots in place when they
        fit (CPU); otherwise the cache is rebuilt once for both changes. Whether free slots are
        worth a compaction is decided at the next step, so rows that join in between (a server
        removes finished rows after a step and adds waiting ones before the next) fill them first."""
        leaving = [q for g in remove for q in g.rows if q.slot >= 0]
        adding = [q for g in add for q in g.rows]
        if leaving:
            self.free(leaving)
        if not adding:
            return
        active = [i for i, q in enumerate(self.rows) if q is not None]
        free = [i for i, q in enumerate(self.rows) if q is None]
        fits = (
            self.engine.device == "cpu"
            and bool(self.past)
            and len(adding) <= len(free)
            and all(q.generation.source_len <= self.bias.shape[3] for q in adding)
        )
        if not fits:
            self._rebuild(active, adding)
            return
        for slot, q in zip(free, adding):
            self._fill(slot, q)
        self.compaction_due = True

    def compact_if_wasteful(self) -> None:
        """Called before a step runs: rebuild when free slots or dead leading self-attention
        slots cost more than a copy would (see the class constants)."""
        self.compaction_due = False
        if self._wasteful() or (self.engine.device != "cpu" and len(self) < len(self.rows)):
            self._rebuild([i for i, q in enumerate(self.rows) if q is not None], [])

    def reorder(self, dest: np.ndarray, src: np.ndarray) -> None:
        """Rows `dest` take the state of rows `src` (beam search: each beam continues from its
        parent): self-attention cache, mask, positions, token counts. Whisper's
        rearrange_kv_cache, on the rows of one request only."""
        if np.array_equal(dest, src):
            return
        if self.engine.device == "cpu":
            for a in self._past_numpy():  # views on the OrtValues: gathered in place
                a[dest] = a[src]
        else:  # device memory: round trip through numpy (beam search on CUDA pays a copy)
            past = [a.copy() for a in self._past_numpy()]
            for a in past:
                a[dest] = a[src]
            self.past_np = past
            self.past = [self.engine._ortvalue(p) for p in past]
        for a in (self.mask, self.positions):  # equal within a request's rows; gathered for generality
            a[dest] = a[src]

    def _fill(self, i: int, q: Row) -> None:
        """Put a new row in free slot i, in place. Its past slots keep the old row's (finite)
        values under a zero mask, so they need no clearing; its cross K/V and bias are written."""
        g = q.generation
        for j, c in enumerate(self.cross_np):
            c[i, :, : g.source_len] = g.cross[j]
        self.bias[i, 0, 0, :] = NEG_INF
        self.bias[i, 0, 0, : g.source_len] = g.bias
        self.mask[i, :] = 0
        self.input_ids[i, 0] = self.engine.bos_id
        self.positions[i, 0] = 0
        self.live[i, 0] = 1
        self.source_lens[i] = g.source_len
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

    def _rebuild(self, keep: list[int], add: list[Row]) -> None:
        """Copy the kept rows (in order) and the new ones into fresh arrays: free slots dropped,
        leading self-attention slots no kept row uses trimmed, cross width = the longest source."""
        e = self.engine
        if not keep and not add:
            self._reset()
            return
        idx = np.asarray(keep, dtype=np.int64)
        k, n = len(keep), len(keep) + len(add)
        mask = self.mask[idx]  # [k, P]
        used = np.flatnonzero(mask.any(axis=0))
        first = int(used[0]) if used.size else mask.shape[1]  # leading slots no kept row uses
        p = mask.shape[1] - first
        s = max([int(x) for x in self.source_lens[idx]] + [q.generation.source_len for q in add])
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
            for r, q in enumerate(add):
                g = q.generation
                out[k + r, :, : g.source_len] = g.cross[j]
            cross.append(out)
        bias = np.full((n, 1, 1, s), NEG_INF, e.bias_dtype)
        bias[:k, :, :, :m] = self.bias[idx, :, :, :m]
        for r, q in enumerate(add):
            bias[k + r, 0, 0, : q.generation.source_len] = q.generation.bias
        self.bias = bias
        self.mask = np.concatenate([mask[:, first:], np.zeros((len(add), p), np.int64)])
        self.input_ids = np.concatenate([self.input_ids[idx], np.full((len(add), 1), e.bos_id, np.int64)])
        self.positions = np.concatenate([self.positions[idx], np.zeros((len(add), 1), np.int64)])
        self.live = np.ones((n, 1), np.int64)
        self.source_lens = np.concatenate([self.source_lens[idx], [q.generation.source_len for q in add]]).astype(np.int64)
        self.state.take(idx, add)
        self._set(past, cross)
