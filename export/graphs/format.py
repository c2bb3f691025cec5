"""What every written graph shares, without torch: the opset and IR version it is saved with, its inputs and
outputs as bundle.json records them, and the external-data files it refers to."""

from __future__ import annotations

from pathlib import Path

import onnx

OPSET = 17
# ONNX Runtime 1.31 loads IR <= 13 while onnx 1.23 writes IR 14 by default:
# save with the smallest IR version the opset needs.
MAX_IR_VERSION = 10


def graph_io(path: Path) -> dict:
    """{"inputs": [{name, dtype, shape}], "outputs": [...]} as bundle.json records it (symbolic axes by name)."""
    m = onnx.load(str(path), load_external_data=False)

    def describe(values) -> list[dict]:
        out = []
        for v in values:
            tt = v.type.tensor_type
            shape = [d.dim_param if d.dim_param else d.dim_value for d in tt.shape.dim]
            out.append({"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name, "shape": shape})
        return out

    return {"inputs": describe(m.graph.input), "outputs": describe(m.graph.output)}


def external_data_files(path: Path) -> list[str]:
    """The external-data files a graph refers to (names relative to its directory)."""
    model = onnx.load(str(path), load_external_data=False)
    names = []
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            names += [entry.value for entry in tensor.external_data if entry.key == "location"]
    return list(dict.fromkeys(names))
