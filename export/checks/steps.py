"""Runs of the v2 decoder outside the engine: the step runner that calibration of its int8 scales, its batch
invariance (export/checks/invariance.py's InPlaceSteps) and the fp16 check use.

A v2 step (export/graphs/v2.py) reads each row's past from a buffer [B, H, Pmax, Dh] at positions below
`past_lengths[b]` and writes the new K/V at `past_lengths[b]`. Here the buffers are bound through
IOBinding as both past and present, as the engine binds them, so what is checked is the in-place
step the service runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.service.engine.names import (
    ATTENTION_MASK,
    DECODER,
    ENCODER,
    ENCODER_ATTENTION_BIAS,
    INPUT_IDS,
    LOGITS,
    PAST_LENGTHS,
    POSITION_IDS,
    TOTAL_SEQUENCE_LENGTH,
    past_names,
    present_names,
)
from attnserve.service.engine.runtime import session_options
from attnserve.service.engine.slots import V2_DISABLED_OPTIMIZERS, padded_source_len

NEG_INF = -1e9


def v2_session(path: Path | bytes, threads: int = 1) -> ort.InferenceSession:
    src = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(
        src, session_options(threads), providers=["CPUExecutionProvider"], disabled_optimizers=V2_DISABLED_OPTIMIZERS
    )


class StepRunner:
    """A v2 decoder over B rows with in-place cache buffers [B, H, Pmax, Dh] bound as past and present."""

    def __init__(self, session: ort.InferenceSession, n_layers: int, rows: int, max_len: int, extra_outputs=()):
        self.session, self.n_layers = session, n_layers
        inputs = {i.name: i for i in session.get_inputs()}
        first = inputs[past_names(n_layers, DECODER)[0]]
        h, dh = first.shape[1::2]
        self.dtype = np.float16 if first.type == "tensor(float16)" else np.float32
        self.cache = [np.zeros((rows, h, max_len, dh), self.dtype) for _ in range(2 * n_layers)]
        self.binding = session.io_binding()
        self.values = [ort.OrtValue.ortvalue_from_numpy(a) for a in self.cache]
        for past, present, v in zip(past_names(n_layers, DECODER), present_names(n_layers, DECODER), self.values):
            self.binding.bind_ortvalue_input(past, v)
            self.binding.bind_ortvalue_output(present, v)
        self.total = np.array([max_len], np.int32)
        self.outputs = [LOGITS, *extra_outputs]
        for name in self.outputs:
            self.binding.bind_output(name)

    def set_cross(self, bias: np.ndarray, cross: list[np.ndarray]) -> None:
        """bias [B, 1, 1, S'] and cross K/V [B, H, S', Dh] (S' already padded)."""
        self._keep = [np.ascontiguousarray(bias, np.float32), *(np.ascontiguousarray(c, self.dtype) for c in cross)]
        self.binding.bind_cpu_input(ENCODER_ATTENTION_BIAS, self._keep[0])
        for name, c in zip(past_names(self.n_layers, ENCODER), self._keep[1:]):
            self.binding.bind_cpu_input(name, c)

    def step(self, tokens: np.ndarray, past_lengths: np.ndarray) -> list[np.ndarray]:
        """tokens [B] int64, past_lengths [B] int32 -> [logits [B, V], *extra outputs]."""
        lengths = np.ascontiguousarray(past_lengths, np.int32)
        # kept referenced until the next step: the binding may read them when it runs
        self._inputs = (np.ascontiguousarray(tokens, np.int64)[:, None].copy(), lengths[:, None].copy(), lengths)
        self.binding.bind_cpu_input(INPUT_IDS, self._inputs[0])
        self.binding.bind_cpu_input(POSITION_IDS, self._inputs[1])
        self.binding.bind_cpu_input(PAST_LENGTHS, self._inputs[2])
        self.binding.bind_cpu_input(TOTAL_SEQUENCE_LENGTH, self.total)
        self.session.run_with_iobinding(self.binding)
        return [o.numpy().copy() for o in self.binding.get_outputs()[2 * self.n_layers :]]  # the caches were bound first


def encode_alone(encoder: ort.InferenceSession, ids: list[int], n_layers: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """One source alone, padded to its cross key length: (bias [1,1,1,S'], cross K/V [1,H,S',Dh] each)."""
    x = np.asarray([ids], np.int64)
    out = dict(zip([o.name for o in encoder.get_outputs()], encoder.run(None, {INPUT_IDS: x, ATTENTION_MASK: np.ones_like(x)})))
    return pad_cross(out[ENCODER_ATTENTION_BIAS][0, 0, 0], [out[n][0] for n in present_names(n_layers, ENCODER)], len(ids), None)


def pad_cross(bias: np.ndarray, cross: list[np.ndarray], n: int, width: int | None, fill=None):
    """One row's bias [n] and cross K/V [H, n, Dh] -> [1,1,1,W], [1,H,W,Dh] with W = `width` or n padded;
    padded keys hold zeros (or `fill`'s finite garbage) under a -1e9 bias."""
    w = width or padded_source_len(n)
    b = np.full((1, 1, 1, w), NEG_INF, np.float32)
    b[0, 0, 0, :n] = bias[:n]
    out = []
    for c in cross:
        a = np.zeros((1, c.shape[0], w, c.shape[2]), np.float32) if fill is None else fill((1, c.shape[0], w, c.shape[2]))
        a[0, :, :n] = c[:, :n]
        out.append(a)
    return b, out
