"""`attnserve-export simplify-encoder` (export/pipeline/simplify_encoder.py, export/graphs/encoder_simplify.py) on the
tiny bundle's encoders as exported (before `build` rewrites them itself): its fp32 and int8 encoders lose their
shape plumbing, every output stays bitwise the same in ONNX Runtime, the manifest's hashes follow, and a rewrite the
proof cannot cover is refused."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.cli import main as export_main
from attnserve.export.graphs.encoder_simplify import simplify_encoder
from attnserve.export.pipeline.simplify_encoder import compare_outputs, encoder_feeds, parity_batches
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.runtime import session_options


@pytest.fixture(scope="module")
def simplified(tiny_bundle_as_exported, tmp_path_factory):
    out = tmp_path_factory.mktemp("simplified") / "g2p-tiny"
    shutil.copytree(tiny_bundle_as_exported, out)
    assert export_main(["simplify-encoder", str(out)]) == 0
    return out


def _encoders(bundle_dir) -> list[str]:
    meta = json.loads((bundle_dir / "bundle.json").read_text())
    return list(dict.fromkeys(v["encoder"] for v in meta["variants"].values()))


def test_every_encoder_loses_its_shape_plumbing(tiny_bundle_as_exported, simplified):
    names = _encoders(tiny_bundle_as_exported)
    assert {"encoder.onnx", "encoder.int8.onnx"} <= set(names)
    for name in names:
        before = onnx.load(str(tiny_bundle_as_exported / name), load_external_data=False)
        after = onnx.load(str(simplified / name), load_external_data=False)
        assert len(after.graph.node) < len(before.graph.node) * 0.6, name
        for node in after.graph.node:
            if node.op_type == "Reshape":  # every head split and merge reads a constant shape
                assert node.input[1] in {i.name for i in after.graph.initializer}, (name, node.name)
        # No Shape is read for anything but the positions' length and (int8) the key count of its softmax.
        shapes = [n for n in after.graph.node if n.op_type == "Shape"]
        assert all(n.attribute for n in shapes), name
        assert Counter(n.op_type for n in after.graph.node)["Gather"] == 1  # the token embedding
        assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]


def test_outputs_are_bitwise_the_same_padded_and_batched(tiny_bundle_as_exported, simplified):
    batches = parity_batches(tiny_bundle_as_exported)
    assert sorted({len(b) for b in batches}) == [1, 4, 32]
    for name in _encoders(tiny_bundle_as_exported):
        assert compare_outputs(tiny_bundle_as_exported / name, simplified / name, batches, threads=1) == [], name
    # the check itself sees a difference when there is one
    assert compare_outputs(tiny_bundle_as_exported / "encoder.onnx", simplified / "encoder.int8.onnx", batches[:2]) != []


def test_manifest_follows_and_a_second_run_changes_nothing(simplified):
    bundle = load_bundle(simplified)  # raises on any hash that does not match
    record = bundle.meta["encoder_graph"]["files"]
    assert record["encoder.int8.onnx"]["nodes_after"] < record["encoder.int8.onnx"]["nodes_before"]
    hashes = dict(bundle.meta["files"])
    assert export_main(["simplify-encoder", str(simplified)]) == 0
    again = load_bundle(simplified).meta
    assert again["files"] == hashes
    assert again["encoder_graph"]["files"]["encoder.onnx"]["nodes_before"] == record["encoder.onnx"]["nodes_before"]


def _reshape_graph(perm: list[int], gather_index: int) -> onnx.ModelProto:
    """y = Reshape(Transpose(x, perm), [dim of x read through Shape/Gather, 6]) for x of shape [B, 2, 3]."""
    consts = {"i": np.array(gather_index, np.int64), "ax": np.array([0], np.int64), "six": np.array([6], np.int64)}
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=perm),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
        helper.make_node("Unsqueeze", ["g", "ax"], ["u"]),
        helper.make_node("Concat", ["u", "six"], ["shape"], axis=0),
        helper.make_node("Reshape", ["t", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_dim_is_made_constant_only_where_it_is_provably_the_same():
    x = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3)
    # the batch dim, read from x and kept in place by the Transpose: becomes a constant 0
    same = _reshape_graph([0, 2, 1], 0)
    rewritten = simplify_encoder(same)
    assert [n.op_type for n in rewritten.graph.node] == ["Transpose", "Reshape"]
    assert _run(rewritten, x).tobytes() == _run(same, x).tobytes()
    # dim 0 of the transposed tensor is x's dim 2 (3), not dim 0: left as it was
    moved = _reshape_graph([2, 0, 1], 0)
    assert [n.op_type for n in simplify_encoder(moved).graph.node] == [n.op_type for n in moved.graph.node]


def test_feeds_pad_to_the_longest_row_plus_extra():
    feeds = encoder_feeds([[5, 6], [7]], pad_id=0, extra=2)
    assert feeds["input_ids"].tolist() == [[5, 6, 0, 0], [7, 0, 0, 0]]
    assert feeds["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]
