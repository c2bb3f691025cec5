"""`attnserve-export simplify-encoder BUNDLE`: every encoder graph of a bundle rewritten without its shape
plumbing (export/encoder_graph.py), proven bitwise the same on the bundle's parity corpus, then the hashes.

The proof runs the old and the new graph through ONNX Runtime with the options the server uses, on every
parity-corpus source in batches of 1, 4 and 32 rows, padded to the batch's longest row plus PAD_EXTRA
padding positions (as a batch with a longer row in it would be): every output must be bitwise equal.
A graph that no rewrite applies to is left untouched. bundle.json records the node counts under
`encoder_graph`; running the command again changes nothing.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from export.encoder_graph import op_counts, simplify_encoder
from export.errors import BuildError
from export.manifest import PARITY_CORPUS, external_data_files, write_manifest

BATCHES = (1, 4, 32)
PAD_EXTRA = 3
REWRITE = (
    "Reshape shapes read back from the reshaped tensor made constant (0 = keep that dim), positions sliced "
    "from the table and broadcast by their Add, dead Shape/Gather/Unsqueeze/Concat chains removed: "
    "every output bitwise the same"
)


def simplify_bundle_encoders(bundle_dir: Path, log: Callable[[str], None] = print) -> dict:
    """Rewrite each distinct encoder file of the bundle at `bundle_dir` in place; returns bundle.json's
    `encoder_graph` record. Raises BuildError (nothing written) when any output differs."""
    from service.engine.bundle import load_bundle

    bundle_dir = Path(bundle_dir)
    meta = load_bundle(bundle_dir).meta  # every hash checked before anything is rewritten
    pad_id = int(meta["special_ids"]["pad"])
    batches = parity_batches(bundle_dir)
    record = dict(meta.get("encoder_graph", {}))
    record["rewrite"] = REWRITE
    files = dict(record.get("files", {}))
    for name in dict.fromkeys(v["encoder"] for v in meta["variants"].values()):
        path = bundle_dir / name
        before = onnx.load(str(path))
        after = simplify_encoder(before)
        if len(after.graph.node) == len(before.graph.node):
            log(f"{name}: nothing to rewrite ({len(before.graph.node)} nodes)")
            files.setdefault(name, {"nodes_before": op_counts(before)["total"], "nodes_after": op_counts(after)["total"]})
            continue
        onnx.checker.check_model(after)
        with tempfile.TemporaryDirectory() as tmp:
            candidate = Path(tmp) / name
            save_like(after, candidate, external_data_files(path))
            differences = compare_outputs(path, candidate, batches, pad_id)
            if differences:
                raise BuildError(f"{name}: the rewritten encoder is not bitwise the same: " + "; ".join(differences[:5]))
            save_like(after, path, external_data_files(path))
        files[name] = {
            "nodes_before": files.get(name, {}).get("nodes_before", len(before.graph.node)),
            "nodes_after": len(after.graph.node),
            "ops_after": op_counts(after),
        }
        log(f"{name}: {len(before.graph.node)} -> {len(after.graph.node)} nodes, bitwise equal on {sum(map(len, batches))} rows")
    record["files"] = files
    record["checked"] = {"batches": list(BATCHES), "pad_extra": PAD_EXTRA, "inputs": "parity corpus source_ids"}
    meta["encoder_graph"] = record
    write_manifest(bundle_dir, meta)
    return record


def save_like(model: onnx.ModelProto, path: Path, data_files: list[str]) -> None:
    """Save `model` as the graph it replaces was stored: weights inline, or in the one external file it used."""
    if data_files:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data_files[0])
    else:
        onnx.save(model, str(path))


def parity_batches(bundle_dir: Path) -> list[list[list[int]]]:
    """The parity corpus's source ids cut into consecutive batches of each size in BATCHES."""
    sources = json.loads((bundle_dir / PARITY_CORPUS).read_text())["source_ids"]
    return [sources[i : i + size] for size in BATCHES for i in range(0, len(sources), size)]


def encoder_feeds(rows: list[list[int]], pad_id: int = 0, extra: int = PAD_EXTRA) -> dict[str, np.ndarray]:
    """input_ids and attention_mask for `rows`, right-padded to the longest row plus `extra` positions."""
    width = max(map(len, rows)) + extra
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def compare_outputs(old: Path, new: Path, batches: list[list[list[int]]], pad_id: int = 0, threads: int = 1) -> list[str]:
    """Where the two encoders' outputs differ in any bit (empty when they never do)."""
    import onnxruntime as ort

    from service.engine.runtime import session_options

    sessions = [ort.InferenceSession(str(p), session_options(threads), providers=["CPUExecutionProvider"]) for p in (old, new)]
    names = [o.name for o in sessions[0].get_outputs()]
    if names != [o.name for o in sessions[1].get_outputs()]:
        return [f"outputs {names} became {[o.name for o in sessions[1].get_outputs()]}"]
    differences = []
    for rows in batches:
        feeds = encoder_feeds(rows, pad_id)
        for name, a, b in zip(names, *(s.run(None, feeds) for s in sessions)):
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                differences.append(f"{name} at batch {len(rows)} (first row {rows[0]})")
    return differences
