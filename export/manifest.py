"""A bundle's files on disk, without torch: the graphs' recorded io, their external data, and bundle.json
with the sha256 of every file it refers to. What `build` (export/bundle.py) writes and what `add-variant`
(export/add_variant.py) rewrites on a machine with no PyTorch (a GPU host: `attnserve-gpu-check`)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from service.engine.bundle import sha256_file

OPSET = 17
# ONNX Runtime 1.31 loads IR <= 13 while onnx 1.23 writes IR 14 by default:
# save with the smallest IR version the opset needs.
MAX_IR_VERSION = 10

BUNDLE_JSON = "bundle.json"
PARITY_CORPUS = "parity_corpus.json"
TOKENIZERS = {"source": "src_tokenizer.json", "target": "tgt_tokenizer.json"}


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


def write_manifest(bundle_dir: Path, meta: dict) -> None:
    """Hash every file the bundle refers to and write bundle.json (itself not listed)."""
    names = [*TOKENIZERS.values(), *(v[g] for v in meta["variants"].values() for g in ("encoder", "decoder"))]
    if (bundle_dir / PARITY_CORPUS).is_file():
        names.append(PARITY_CORPUS)
    if "explain" in meta:  # decoder.explain.onnx (export/explain.py)
        names.append(meta["explain"]["decoder"])
    if "lexicon" in meta:  # lexicon.tsv.gz (export/lexicon.py)
        names.append(meta["lexicon"]["file"])
    if "context" in meta:  # context.json.gz (export/context.py)
        names.append(meta["context"]["file"])
    names += [data for name in names if name.endswith(".onnx") for data in external_data_files(bundle_dir / name)]
    meta["files"] = {name: sha256_file(bundle_dir / name) for name in dict.fromkeys(names)}
    (bundle_dir / BUNDLE_JSON).write_text(json.dumps(meta, indent=2) + "\n")


def update_manifest(bundle_dir: Path, **fields) -> dict:
    meta = json.loads((bundle_dir / BUNDLE_JSON).read_text())
    meta.update(fields)
    (bundle_dir / BUNDLE_JSON).write_text(json.dumps(meta, indent=2) + "\n")
    return meta
