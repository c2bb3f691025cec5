"""The ONNX Runtime decode loop: the one place the project turns ids into ids.

Export proves parity on this loop, eval/bench/bulk generation use it, and the
service's scheduler drives its continuous-batching primitives:

    batch = engine.new_batch()                                 # the served variant's kind of batch
    gens, sources = engine.start([(source_ids, options), ...])  # encoder once for these sources
    batch.add(gens, sources)                                   # join at a step boundary (all their rows)
    results = engine.step(batch)                               # ONE decoder call for all rows
    batch.remove([r.generation for r in results if r.finish_reason])  # cancelled ones too

(`engine.join(batch, items)` is `start` then `add`.) The batch calls are service/engine/contract.py's.

Token choice, seeding and stopping are the decoding rooms' (service/engine/step.py's `choose_tokens`
and the modules it calls): this module runs the graphs and keeps the batch, and calls it once per step for all rows.

A request (a `Generation`) owns one batch row, or N: its beams (beam search,
`best_of` without sampling) or its `best_of` samples. The encoder runs once per
request; the batch copies its cross-attention K/V (an `EncodedSource`) into each of its rows. Rows of beam
search follow their beams: after each step the batch gathers their self-attention cache by parent
(Whisper's rearrange_kv_cache). Rows that finish leave the batch at once, so a short request is never
held by a long one.

The batch and its cache (layout, joins, compaction, beam reorder) are the batch contract's
(service/engine/contract.py), written once in service/engine/slots.py: each row's cache in a slot of the batch's
buffers. The engine picks the step once, when it loads the variant, from the variant's `kv_cache`
(`BATCH_KINDS`): `SlotBatch` for a v2 decoder (`"in_place"`: the fused decoder writes each slot in place), its
v1 adapter `ConcatSlotBatch` for the v1 reference graph (`"concat"`), served only when asked for or as a fallback.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.service.engine.beam import LengthPenaltySearch
from attnserve.service.engine.bundle import BundleError, LoadedBundle
from attnserve.service.engine.concat import ConcatSlotBatch
from attnserve.service.engine.contract import BufferPool, CacheLayout, DecodeBatch, DecoderSpec, EncodedSource, KernelsMissing
from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    NEXT_TOKEN,
    past_names,
    present_names,
)
from attnserve.service.engine.options import DecodingOptions, InputError
from attnserve.service.engine.processors import log_softmax
from attnserve.service.engine.rows import Generation, new_generation
from attnserve.service.engine.rules import GenerationRules, row_histories
from attnserve.service.engine.runtime import (
    OrtValues,
    StepCalls,
    available_cpus,
    gpu_present,
    preload_cuda,
    providers,
    session_options,
)
from attnserve.service.engine.slots import SlotBatch
from attnserve.service.engine.step import StepResult, choose_tokens
from attnserve.service.engine.stopping import Hypothesis

log = logging.getLogger("attnserve.engine")

__all__ = ["DecodingOptions", "Engine", "EngineError", "Generation", "GenerationResult", "InputError", "StepResult"]


# the batch kind of each kv_cache layout (bundle.json `variants.<name>.kv_cache`): the engine picks one at load
BATCH_KINDS: dict[str, type[DecodeBatch]] = {kind.KV_CACHE: kind for kind in (ConcatSlotBatch, SlotBatch)}


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
        so = session_options(self.threads, spin)
        self.spin = spin
        if use_cuda:
            for line in preload_cuda():
                log.warning("loading CUDA libraries: %s", line)
        try:
            self._load(so, use_cuda)
        except KernelsMissing as e:
            fallback = bundle.fallback(self.variant)
            if variant != "auto" or not fallback:
                raise BundleError(f"variant {self.variant!r} cannot run here: {e}") from None
            log.warning("variant %r (v2, in-place cache) cannot run here (%s); serving %r (v1)", self.variant, e, fallback)
            self.variant = fallback
            self._load(so, use_cuda)
        self.provider = self.decoder.get_providers()[0]
        self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        # the decode step's calls and the values a v1 step feeds (host arrays, whatever the device: ONNX Runtime
        # copies them over), through service/engine/runtime.py's one adapter: ONNX Runtime's C++ session where
        # known, its public API elsewhere (decided once, for both)
        self.step_calls = StepCalls(self.decoder)
        self.values = OrtValues("cpu", self.step_calls.private)
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
        self.past_names = past_names(self.n_layers, DECODER)
        self.cross_names = past_names(self.n_layers, ENCODER)
        self.kv_dtype = _np_dtype(dec_inputs[self.past_names[0]].type)
        self.bias_dtype = _np_dtype(dec_inputs[ENCODER_ATTENTION_BIAS].type)
        has_next_token = NEXT_TOKEN in {o.name for o in self.decoder.get_outputs()}
        output_names = [LOGITS, *present_names(self.n_layers, DECODER), *([NEXT_TOKEN] if has_next_token else [])]
        self.encoder_output_names = [o.name for o in self.encoder.get_outputs()]
        # the decode step's one call, the batch kind's own of the adapter's two (v1: {name: OrtValues.input value}
        # in, the outputs back; v2: one call over the batch's bound buffers)
        self.run_decoder = self.batch_kind.step_call(self.step_calls)

        self.vocab_size = int(bundle.config["tgt_vocab_size"])
        # an imported checkpoint's whole special set (T5's sentinels, say) besides the four of special_ids
        self.special_token_ids = frozenset(ids.values()) | frozenset(bundle.meta.get("special_tokens", []))
        self._imported(bundle.meta)
        self.layout = CacheLayout(
            self.n_layers, self.n_heads, self.head_dim, self.kv_dtype, self.bias_dtype, self.bos_id, self.vocab_size
        )
        spec = (self.decoder, self.layout, self.max_target_len, self.device, self.step_calls, self.values)
        self.decoder_spec = DecoderSpec(*spec, output_names, has_next_token)

    def _imported(self, meta: dict) -> None:
        """What a bundle imported from a Hugging Face checkpoint adds (export/pipeline/from_hf.py): the ids its
        tokenizer puts around a source, unknown pieces kept as transformers keeps them, its generation rules on
        every step and transformers' beam search with its length penalty."""
        # ids a streamed token reports as special besides the end token: the checkpoint's whole special set
        self.marked_special = self.special_token_ids if "special_tokens" in meta else frozenset()
        template = meta.get("source_template") or {}
        self.source_prefix = [int(i) for i in template.get("prefix", [])]
        self.source_suffix = [int(i) for i in template.get("suffix", [])]
        self.keep_unknown = bool(meta.get("keep_unknown_source_tokens", False))
        generation = meta.get("generation")
        self.rules = GenerationRules.of(generation, self.vocab_size, self.bos_id, self.eos_id)
        self.search_kind = None  # rows.py's BeamSearch
        if generation is not None:
            lp, early = float(generation.get("length_penalty", 1.0)), generation.get("early_stopping", False)

            def search_kind(width, n_best, eos_id, stopping, decode=None):
                return LengthPenaltySearch(width, n_best, eos_id, stopping, decode, lp, early)

            self.search_kind = search_kind

    @property
    def search_defaults(self) -> dict[str, int]:
        """An imported checkpoint's defaults for requests that leave them unset (keywords of the request layer's
        `Limits`): its max_length less the decoder start token, its num_beams when more than one."""
        generation = self.bundle.meta.get("generation") or {}
        out = {}
        if generation.get("max_length"):
            out["default_new_tokens"] = min(int(generation["max_length"]) - 1, self.max_target_len)
        if int(generation.get("num_beams") or 1) > 1:
            out["default_num_beams"] = int(generation["num_beams"])
        return out

    @property
    def family(self) -> str | None:
        """The model family of an imported checkpoint (bundle.json `family`: marian, bart, t5...), or None."""
        return self.bundle.meta.get("family")

    # ---- text -------------------------------------------------------------------------
    def encode_text(self, text: str) -> list[int]:
        """Source ids for `text`; InputError if empty, too long, or holding characters the model cannot read."""
        ids = self.tokenize_text(text)
        if len(ids) > self.max_source_len:
            raise InputError(f"input is {len(ids)} tokens long; this model reads at most {self.max_source_len}")
        return ids

    def tokenize_text(self, text: str) -> list[int]:
        """Source ids for `text` of any length (the request layer applies the server's length limit, with its
        `truncate` hint); InputError if empty or holding characters the model cannot read."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("input text is empty")
        enc = self.src_tokenizer.encode(text, add_special_tokens=False)
        unknown = [text[a:b] for tok, (a, b) in zip(enc.ids, enc.offsets) if tok == self.unk_id]
        if unknown and not self.keep_unknown:
            shown = ", ".join(repr(c) for c in dict.fromkeys(unknown))
            raise InputError(f"input contains text this model cannot read: {shown}; remove or replace it")
        if not enc.ids:
            raise InputError("input text has no tokens this model can read")
        if self.source_prefix or self.source_suffix:
            return [*self.source_prefix, *enc.ids, *self.source_suffix]
        return list(enc.ids)

    def decode_ids(self, ids: SequenceABC[int]) -> str:
        return self.tgt_tokenizer.decode(list(ids), skip_special_tokens=True)

    # ---- continuous-batching primitives -----------------------------------------------
    def start(self, items: list[tuple[list[int], DecodingOptions]]) -> tuple[list[Generation], list[EncodedSource]]:
        """Run the encoder ONCE for these sources; return generations ready to join a batch, and each one's encoder
        output (what `batch.add` takes with them). InputError, before the encoder runs, for a source it refuses."""
        if not items:
            return [], []
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
        bias, *kv = self.encoder.run(None, {INPUT_IDS: input_ids, ATTENTION_MASK: mask})  # [n,1,1,s], 2L x [n,H,s,Dh]
        gens, sources = [], []
        for i, (ids, opts) in enumerate(items):
            li = len(ids)
            bound = self.bundle.length_bound(li)
            gens.append(new_generation(ids, opts, bound, self.eos_id, self.decode_ids, self.search_kind))
            sources.append(EncodedSource([a[i, :, :li] for a in kv], bias[i, 0, 0, :li]))  # shared by the request's rows
        return gens, sources

    def join(self, batch: DecodeBatch, items: list[tuple[list[int], DecodingOptions]]) -> list[Generation]:
        """`start` these sources and add their rows to `batch`: their generations (nothing joins on InputError)."""
        gens, sources = self.start(items)
        batch.add(gens, sources)
        return gens

    def _load(self, so: ort.SessionOptions, use_cuda: bool) -> None:
        """The variant's two sessions, and its batch kind, picked here once from the variant's `kv_cache`. The kind
        says how its decoder is loaded (a v2 decoder without SkipLayerNormFusion: its Add + LayerNormalization
        measured faster) and checked (a v2 one against the inputs bundle.json records); one that ONNX Runtime cannot
        run here raises KernelsMissing (the caller falls back or stops)."""
        enc_path, dec_path = self.bundle.graph_paths(self.variant)
        self.kv_cache = self.bundle.kv_cache(self.variant)
        kind = BATCH_KINDS[self.kv_cache]
        self.batch_kind = kind
        self.buffer_pool = BufferPool()  # lent to every batch: self-attention buffers of emptied batches, for the next
        # `generate`'s emptied batch, which the next call takes again: its buffers and binding kept (SlotBatch._emptied)
        self.idle_batches: list[DecodeBatch] = []
        try:
            self.encoder = ort.InferenceSession(str(enc_path), so, providers=providers(use_cuda))
            self.decoder = ort.InferenceSession(
                str(dec_path), so, providers=providers(use_cuda), disabled_optimizers=kind.DISABLED_OPTIMIZERS
            )
        except Exception as e:  # ONNX Runtime raises its own exception types; keep one line
            reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise kind.load_error(dec_path, self.variant, reason) from None
        kind.check_decoder(self.decoder, self.bundle, self.variant, use_cuda)

    @property
    def kv_cache_bytes_per_row(self) -> int:
        """A row's self-attention cache at max_target_len positions: what a slot holds (allocated up front)."""
        itemsize = np.dtype(self.kv_dtype).itemsize
        return 2 * self.n_layers * self.n_heads * self.max_target_len * self.head_dim * itemsize

    def new_batch(self) -> DecodeBatch:
        """An empty batch of the served variant's kind, lent the decoder, the engine's buffer pool and its step call."""
        return self.batch_kind(self.decoder_spec, self.buffer_pool, self.run_decoder)

    def run_step(self, batch: DecodeBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE decoder call for every row of the batch: (logits [B, V] float32, in-graph argmax [B] or None). The
        batch's own `run`; a seam where a profiler or a test may wrap the step."""
        return batch.run()

    def step(self, batch: DecodeBatch) -> list[StepResult]:
        """ONE decoder call for every row, then token choice for every row (service/engine/step.py);
        returns a StepResult per streaming generation and per generation that finished."""
        if not len(batch):
            return []
        logits, next_tokens = self.run_step(batch)
        normalised = False
        if self.rules is not None:  # transformers' order: log-probabilities first, then the rules mask them
            state = batch.state
            # rows that report, rank or sample read the log-probabilities; when none does, the argmax alone reads
            # the masked raw logits, which it orders as it would their log-probabilities (service/engine/rules.py)
            normalised = bool(state.summary.logprobs or state.summary.processed_rows.size)
            if normalised:
                logits = log_softmax(logits)  # a fresh float64 array, masked in place below
            elif not logits.flags.writeable:
                logits = logits.copy()
            limits = np.array([r.generation.max_new_tokens if r is not None and r.generation else 0 for r in state.rows])
            history = lambda: row_histories(state.rows, self.bos_id)  # noqa: E731 - read only by the rules that need it
            logits = self.rules.apply(logits, state.n_generated, limits, history)
            next_tokens = None  # the in-graph argmax saw none of the rules
        choice = choose_tokens(batch.state, logits, next_tokens, self.eos_id, self.decode_ids, normalised, self.marked_special)
        batch.follow(choice)
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
        # whole answers only: nobody reads a token's text here, so none is decoded per step
        whole: dict[int, DecodingOptions] = {}
        for o in opts:
            if id(o) not in whole:
                whole[id(o)] = dataclasses.replace(o, token_text=False) if o.token_text else o
        opts = [whole[id(o)] for o in opts]
        too_wide = [o.n_rows for o in opts if o.n_rows > batch_size]
        if too_wide:
            raise InputError(f"a request needs {too_wide[0]} rows; batch_size is {batch_size}")
        # Shorter sources together: less padding in the encoder and in cross-attention. Outputs
        # do not depend on the company a row keeps, so the order is free.
        order = sorted(range(len(items)), key=lambda i: len(items[i])) if sort else list(range(len(items)))
        gens: list[Generation | None] = [None] * len(items)
        try:  # another thread's call may have taken it: list.pop is atomic
            batch = self.idle_batches.pop()
        except IndexError:
            batch = self.new_batch()
        cursor = 0
        while cursor < len(order) or len(batch):
            if cursor < len(order) and (refill or not len(batch)):
                take, rows = [], len(batch)
                while cursor < len(order) and rows + opts[order[cursor]].n_rows <= batch_size:
                    take.append(order[cursor])
                    rows += opts[order[cursor]].n_rows
                    cursor += 1
                for i, g in zip(take, self.join(batch, [(items[i], opts[i]) for i in take])):
                    gens[i] = g
            self.step(batch)
        if not self.idle_batches:
            self.idle_batches.append(batch)
        return [GenerationResult.of(g) for g in gens]
