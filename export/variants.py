"""The int8 and fp16 variants: the same graphs under other names (Contract 2).

- int8: ONNX Runtime's dynamic quantization of the MatMul weights (activations
  quantized per batch at run time). Whether it becomes the CPU default is
  decided by the gate in bundle.py, on measured WER and speed.
- fp16: for CUDA. Weights and activations in float16, but LayerNorm and
  softmax computed in float32, and the float inputs/outputs that carry the
  attention bias and the logits stay float32 at the graph boundary (so -1e9
  never becomes -inf outside the graph and sampling sees float32 logits).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx

from export.onnx import MAX_IR_VERSION

FP32_BOUNDARY = ("encoder_attention_bias", "logits")  # stay float32 in the fp16 graphs
FP16_KEEP_FP32_OPS = ["LayerNormalization", "Softmax"]


def quantize_int8(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer's advice to pre-process is for static quantization
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # The quantizer runs shape inference and may write IR 14; lower it afterwards.
            out = Path(tmp) / dst.name
            quantize_dynamic(src, out, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
            m = onnx.load(str(out))
    finally:
        root.setLevel(level)
    m.ir_version = min(m.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))


def convert_fp16(src: Path, dst: Path) -> None:
    # ONNX Runtime ships the converter (a copy of onnxconverter-common's): no extra dependency.
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = onnx.load(str(src))
    io_names = {v.name for v in m.graph.input} | {v.name for v in m.graph.output}
    m16 = convert_float_to_float16(
        m,
        keep_io_types=[n for n in FP32_BOUNDARY if n in io_names],
        op_block_list=FP16_KEEP_FP32_OPS,
        # The output projection stays float32 too: logits are what sampling and argmax read, and
        # float16 rounding of large logits is the biggest error of the variant for little speed.
        node_block_list=_logits_projection(m.graph),
        # Constants outside the float16 range are clipped (the -1e9 mask constants become -1e4,
        # still far below any real score), never turned into inf.
        max_finite_val=1e4,
    )
    _topological_sort(m16.graph)  # the converter appends its Cast nodes at the end
    m16.ir_version = min(m16.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(m16)
    onnx.save(m16, str(dst))


def _topological_sort(graph: onnx.GraphProto) -> None:
    """Reorder nodes so every input is produced before it is used (ONNX requires it)."""
    available = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for node in pending:
            if all(name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise ValueError(f"graph has a cycle or a dangling input near node {rest[0].name!r}")
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)


def _logits_projection(graph: onnx.GraphProto) -> list[str]:
    """Name of the MatMul that produces `logits` (walking back through slicing/reshaping), if any."""
    producer = {out: node for node in graph.node for out in node.output}
    name, seen = "logits", 0
    while name in producer and seen < 8:
        node = producer[name]
        if node.op_type in ("MatMul", "Gemm"):
            return [node.name]
        name, seen = node.input[0], seen + 1
    return []
