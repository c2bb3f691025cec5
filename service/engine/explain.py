"""The explain decode behind POST /explain: a request's cross-attention (the route: service/http/routes/explain.py).

`/explain` takes the body of /generate (`inputs`, `parameters`: the same
validation, auth, limits and error shape) and decodes it with the bundle's
explain graphs (export/pipeline/explain.py): the fp32 encoder and decoder.explain.onnx,
which also returns each layer's cross-attention weights `[B, H, T, S]`. It
answers the output tokens (with probabilities), the source tokens, and for
every output token the weights over the source per layer and head, and their
mean over heads.

Why a loop of its own and not the scheduler's batch: the served graph
(decoder.onnx) does not compute the weights, by design (serving speed does not
change). Explain decodes are batch 1, run one at a time on their own ONNX
Runtime sessions with ONE intra-op thread (so they take at most one core from
the serving engine), and pick tokens with the engine's rules (service/engine/step.py's `choose_tokens`:
the same processors, argmax or the seeded one-uniform-per-step sampler, and stopping).

Tokens are the served variant's: when the server serves fp32, the explain graph's
own logits pick them. When it serves another variant (int8 is the default
model's CPU default), a batch-1 copy of the served graphs steps beside the
explain graph and ITS logits pick each token, which is then fed to both; the
weights are the fp32 graph's over exactly those tokens (teacher-forced). So the
tokens and log-probabilities are what /generate answers for the request, alone
or batched (the int8 variant's activation scales are fixed at export or taken per
row, so the other requests of a batch do not change a row's numbers).

Limits: the request bound (`max_concurrent_requests`) applies to explain
requests in flight (counted apart from generation requests; past it: 429 with
Retry-After), and `request_timeout_s` to each (504). Metrics: the route's
`attnserve_requests_total{route="/explain",outcome}`, and the request-level
histograms (duration, input and generated tokens) and the generated-token
counter; the step and batch metrics stay those of the serving batch.

A bundle built without decoder.explain.onnx answers 501 `not_implemented`: the
route exists, this deployment's model cannot do it (rebuild the bundle).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from attnserve.service.engine.bundle import BundleError, LoadedBundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    DECODER_ATTENTION_MASK,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
    past_names,
    present_names,
)
from attnserve.service.engine.rows import RowState, new_generation
from attnserve.service.engine.runtime import providers, session_options
from attnserve.service.engine.slots import V2_DISABLED_OPTIMIZERS, RowStep
from attnserve.service.engine.step import choose_tokens
from attnserve.service.errors import retry_after_s


# ---- the explain decode ---------------------------------------------------------------------------
class DeadlinePassed(Exception):
    """The request's deadline passed while it waited or decoded (the route answers 504)."""


@dataclass
class Explanation:
    source_ids: list[int]
    token_ids: list[int]  # generated, the end token included when it ended the output
    texts: list[str]  # streamed text deltas, "" for the end token
    logprobs: list[float]
    special: list[bool]
    attention: np.ndarray  # [L, H, T, S] float32
    finish_reason: str
    seed: int | None
    text: str


class Explainer:
    """The bundle's explain graphs (fp32 encoder + decoder.explain.onnx) and a batch-1 decode loop over them."""

    def __init__(self, engine: Engine, threads: int = 1):
        bundle = engine.bundle
        entry = explain_entry(bundle)
        if entry is None:
            raise BundleError(f"{bundle.dir / 'bundle.json'}: no 'explain' entry (no decoder.explain.onnx)")
        self.engine = engine  # tokenizers, special ids and limits are the served ones
        self.graph = entry["decoder"]
        so = session_options(threads)
        on = providers(engine.device == "cuda")
        try:
            self.encoder = ort.InferenceSession(str(bundle.dir / entry["encoder"]), so, providers=on)
            self.decoder = ort.InferenceSession(str(bundle.dir / entry["decoder"]), so, providers=on)
        except Exception as e:  # ONNX Runtime raises its own types; one line
            raise BundleError(f"{bundle.dir / entry['decoder']}: ONNX Runtime cannot load the explain graphs: {e}") from None
        self.served = None  # (encoder, decoder) of the served variant, when it is not the explain graph's fp32
        self.served_in_place = engine.kv_cache == "in_place"  # a v2 decoder: stepped as a slot row (RowStep)
        if engine.variant != "fp32":
            enc_path, dec_path = bundle.graph_paths(engine.variant)
            disabled = V2_DISABLED_OPTIMIZERS if self.served_in_place else []
            try:
                self.served = (
                    ort.InferenceSession(str(enc_path), so, providers=on),
                    ort.InferenceSession(str(dec_path), so, providers=on, disabled_optimizers=disabled),
                )
            except Exception as e:
                raise BundleError(f"{dec_path}: ONNX Runtime cannot load variant {engine.variant!r}: {e}") from None
        n = engine.n_layers
        self.past_names = past_names(n, DECODER)
        self.cross_names = past_names(n, ENCODER)
        self.served_output_names = [LOGITS, *present_names(n, DECODER)]
        self.output_names = [*self.served_output_names, *entry["outputs"]]
        have = {o.name for o in self.decoder.get_outputs()}
        missing = [name for name in self.output_names if name not in have]
        if missing:
            raise BundleError(f"{bundle.dir / entry['decoder']}: missing output(s) {', '.join(missing)}")
        self._lock = threading.Lock()  # one explain decode at a time
        self.in_flight = 0  # explain requests admitted and not finished (event-loop thread only)
        self.mean_request_s = 0.1  # moving average, for Retry-After

    @classmethod
    def for_engine(cls, engine: Engine) -> Explainer | None:
        """The engine's bundle's explainer, or None when the bundle has no explain graph."""
        return cls(engine) if explain_entry(engine.bundle) is not None else None

    def explain(self, source_ids: list[int], options: DecodingOptions, deadline: float | None = None) -> Explanation:
        """Decode one request and keep every step's cross-attention. Raises DeadlinePassed past `deadline`
        (a time.perf_counter() value). Token choice is the engine's: see the module docstring."""
        with self._lock:
            t0 = time.perf_counter()
            out = self._explain(source_ids, options, deadline)
            self.mean_request_s = 0.9 * self.mean_request_s + 0.1 * (time.perf_counter() - t0)
            return out

    def _explain(self, source_ids: list[int], options: DecodingOptions, deadline: float | None) -> Explanation:
        e = self.engine
        s = len(source_ids)
        src = np.asarray([source_ids], dtype=np.int64)  # [1, S]
        # bias [1, 1, 1, S]; cross K/V 2L x [1, H, S, Dh]
        bias, *cross = self.encoder.run(None, {INPUT_IDS: src, ATTENTION_MASK: np.ones_like(src)})
        served, s_past = None, []  # the served variant's decoder, feeds and cache, stepping in lockstep
        if self.served is not None:
            s_encoder, s_decoder = self.served
            s_bias, *s_cross = s_encoder.run(None, {INPUT_IDS: src, ATTENTION_MASK: np.ones_like(src)})
            if self.served_in_place:
                served = RowStep(s_decoder, e.layout, e.max_target_len)
                served.start(s_bias[0, 0, 0], [c[0] for c in s_cross])
            else:
                s_feeds = {ENCODER_ATTENTION_BIAS: s_bias, **dict(zip(self.cross_names, s_cross))}
                s_past = [np.zeros((1, e.n_heads, 0, e.head_dim), s_cross[0].dtype)] * (2 * e.n_layers)  # fp16: fp16 cache
                served = (s_decoder, s_feeds)
        options = dataclasses.replace(options, logprobs=True, token_text=True)  # every token's log-probability and text are shown
        gen = new_generation(source_ids, options, e.bundle.length_bound(s), e.eos_id, e.decode_ids)
        if gen.search is not None or len(gen.rows) != 1:
            raise ValueError("explain decodes one row: best_of and num_beams are refused before this")
        state = RowState(e.vocab_size)  # token choice is the engine's (service/engine/step.py), on one row
        state.take(np.zeros(0, dtype=np.int64), gen.rows)
        feeds: dict[str, np.ndarray] = {ENCODER_ATTENTION_BIAS: bias, **dict(zip(self.cross_names, cross))}
        past = [np.zeros((1, e.n_heads, 0, e.head_dim), np.float32)] * (2 * e.n_layers)  # P = 0 on the first step
        token = e.bos_id
        rows: list[list[np.ndarray]] = []  # per step: L x [H, S]
        texts, logprobs, special = [], [], []
        for step in range(gen.max_new_tokens):
            if deadline is not None and time.perf_counter() > deadline:
                raise DeadlinePassed
            feeds[INPUT_IDS] = np.array([[token]], dtype=np.int64)
            feeds[POSITION_IDS] = np.array([[step]], dtype=np.int64)
            feeds[DECODER_ATTENTION_MASK] = np.ones((1, step + 1), dtype=np.int64)
            feeds.update(zip(self.past_names, past))
            logits, *rest = self.decoder.run(self.output_names, feeds)
            past = rest[: 2 * e.n_layers]
            attn = rest[2 * e.n_layers :]  # L x [1, H, 1, S]
            if isinstance(served, RowStep):  # the served v2 decoder: one slot row, its own past length
                logits = served.step(token, step)
            elif served is not None:  # the served variant's logits choose; the explain graph only watches
                s_decoder, s_feeds = served
                s_feeds.update((k, feeds[k]) for k in (INPUT_IDS, POSITION_IDS, DECODER_ATTENTION_MASK))
                s_feeds.update(zip(self.past_names, s_past))
                logits, *s_past = s_decoder.run(self.served_output_names, s_feeds)
            (result,) = choose_tokens(state, logits, None, e.eos_id, e.decode_ids).results
            token = result.token_id
            rows.append([a[0, :, 0, :s] for a in attn])
            logprobs.append(result.logprob)  # as the engine reports it: the model's raw distribution
            texts.append(result.text)
            special.append(result.special)
            if result.finish_reason is not None:
                break
        ids, text, finish, seed = gen.token_ids, gen.text, gen.finish_reason or "length", gen.seed
        attention = np.stack([np.stack(r, axis=1) for r in zip(*rows)]) if rows else np.zeros((e.n_layers, e.n_heads, 0, s))
        return Explanation(
            source_ids=list(source_ids),
            token_ids=[*ids, e.eos_id] if finish == "eos_token" else ids,
            texts=texts,
            logprobs=logprobs,
            special=special,
            attention=attention.astype(np.float32),  # [L, H, T, S]
            finish_reason=finish,
            seed=seed,
            text=text,
        )

    def retry_after_s(self, waiting: int) -> int:
        """Seconds a refused client should wait: the explains ahead of it, one after another."""
        return retry_after_s(self.mean_request_s, waiting)


def explain_entry(bundle: LoadedBundle) -> dict | None:
    """bundle.json's "explain" entry, checked: its graph must be listed in "files" (so its sha256 was verified)."""
    entry = bundle.meta.get("explain")
    if entry is None:
        return None
    manifest = bundle.dir / "bundle.json"
    if not isinstance(entry, dict) or not all(k in entry for k in ("encoder", "decoder", "outputs")):
        raise BundleError(f"{manifest}: field 'explain' must name its 'encoder', 'decoder' and 'outputs'")
    for name in (entry["encoder"], entry["decoder"]):
        if name not in bundle.meta["files"]:
            raise BundleError(f"{manifest}: {name} is referenced but not listed in 'files' (unverifiable)")
    return entry
