"""A bundle's files on disk, without torch: their names, and bundle.json with the sha256 of every file it refers
to (each graph's external data included) and of its own content (`manifest_sha256`, written by
service/engine/bundle.py's `write_bundle_json`, which every command that writes bundle.json goes through).
What `build` (export/pipeline/build.py) writes and what `add-variant` (export/pipeline/add_variant.py) rewrites
on a machine with no PyTorch (a GPU host: `attnserve-gpu-check`)."""

from __future__ import annotations

import json
from pathlib import Path

from attnserve.export.graphs.format import external_data_files
from attnserve.service.engine.bundle import sha256_file, write_bundle_json

BUNDLE_JSON = "bundle.json"
PARITY_CORPUS = "parity_corpus.json"
TOKENIZERS = {"source": "src_tokenizer.json", "target": "tgt_tokenizer.json"}
VARIANT_FILES = {
    "fp32": {"encoder": "encoder.onnx", "decoder": "decoder.onnx"},
    "int8": {"encoder": "encoder.int8.onnx", "decoder": "decoder.int8.onnx"},
    "fp16": {"encoder": "encoder.fp16.onnx", "decoder": "decoder.fp16.onnx"},
}


def write_manifest(bundle_dir: Path, meta: dict) -> None:
    """Hash every file the bundle refers to and write bundle.json (itself not listed: its own content's hash is
    its `manifest_sha256`)."""
    names = [*TOKENIZERS.values(), *(v[g] for v in meta["variants"].values() for g in ("encoder", "decoder"))]
    if (bundle_dir / PARITY_CORPUS).is_file():
        names.append(PARITY_CORPUS)
    if "explain" in meta:  # decoder.explain.onnx (export/pipeline/explain.py)
        names.append(meta["explain"]["decoder"])
    if "lexicon" in meta:  # lexicon.tsv.gz (export/pipeline/lexicon.py)
        names.append(meta["lexicon"]["file"])
    if "context" in meta:  # context.json.gz (export/pipeline/context.py)
        names.append(meta["context"]["file"])
    names += [data for name in names if name.endswith(".onnx") for data in external_data_files(bundle_dir / name)]
    meta["files"] = {name: sha256_file(bundle_dir / name) for name in dict.fromkeys(names)}
    write_bundle_json(bundle_dir, meta)


def update_manifest(bundle_dir: Path, **fields) -> dict:
    """bundle.json with `fields` set (no file changed, so `files` stands); returns it."""
    meta = json.loads((bundle_dir / BUNDLE_JSON).read_text())
    meta.update(fields)
    write_bundle_json(bundle_dir, meta)
    return meta
