"""`attnserve-export simplify-encoder BUNDLE`: every encoder graph of a bundle rewritten without its shape
plumbing (export/graphs/encoder_simplify.py), proven bitwise the same on the bundle's parity corpus, then the hashes.

The proof runs the old and the new graph through ONNX Runtime with the options the server uses, on every
parity-corpus source in batches of 1, 4 and 32 rows, padded to the batch's longest row plus PAD_EXTRA
padding positions (as a batch with a longer row in it would be), never past the model's `max_source_len` (its
position table has no row beyond it): every output must be bitwise equal.
A graph that no rewrite applies to is left untouched. bundle.json records the node counts under
`encoder_graph`; running the command again changes nothing.

With `--fused-attention`, each encoder's self-attention then becomes MultiHeadAttention
(export/graphs/encoder_attention.py) in the encoders that already need ONNX Runtime's contrib kernels (int8's).
It is not bitwise, so it is kept only where its gate passes (every
variant using that encoder gives the same greedy answers on at least MIN_AGREEMENT_PCT of the parity
corpus through the engine, and each row's outputs are bitwise the same alone and in a padded batch of 32).
Where it is kept, each layer's Q, K and V projections and that MultiHeadAttention then become one QAttention
(export/graphs/encoder_fuse.py), proven bitwise the same as the first rewrite is and recorded under
`encoder_graph.fused_projections`; then the per-token nodes run on the batch's real tokens only
(export/graphs/encoder_pack.py), proven on the same batches for every real position (padding positions change,
and nothing reads them) and on each parity-corpus row alone against in a padded batch of 32, recorded under
`encoder_graph.packed_tokens`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from attnserve.export.errors import BuildError
from attnserve.export.graphs.encoder_attention import fuse_self_attention
from attnserve.export.graphs.encoder_fuse import fuse_qkv_attention
from attnserve.export.graphs.encoder_pack import ATTENTION_OPS, INDEX, pack_tokens
from attnserve.export.graphs.encoder_simplify import op_counts, simplify_encoder
from attnserve.export.pipeline.manifest import BUNDLE_JSON, PARITY_CORPUS, external_data_files, write_manifest
from attnserve.service.engine.names import ENCODER_ATTENTION_BIAS

BATCHES = (1, 4, 32)
MIN_AGREEMENT_PCT = 99.9
# The fp32 graphs are the fallback of a runtime without ONNX Runtime's contrib kernels (encoder.onnx also the fp16 variant's):
# only an encoder that already needs those kernels (int8's MatMulIntegerToFloat) gets MultiHeadAttention.
STANDARD_ONLY = "standard ONNX operators only: the fallback for a runtime without contrib kernels stays so"
PAD_EXTRA = 3
FUSED_PROJECTIONS = (
    "each layer's Q, K and V MatMulIntegerToFloat and MultiHeadAttention as one QAttention (weights, weight scales "
    "and biases concatenated; int32 accumulation is exact): every output bitwise the same"
)
PACKED_TOKENS = (
    "LayerNorms, quantizations, projections, ReLUs and residual Adds on the batch's real tokens only, packed [T, D] "
    "by the attention mask, padded again for the attention and the outputs: every real position of every output "
    "bitwise the same, padding positions holding copies of real tokens' values"
)
REWRITE = (
    "Reshape shapes read back from the reshaped tensor made constant (0 = keep that dim), positions sliced "
    "from the table and broadcast by their Add, dead Shape/Gather/Unsqueeze/Concat chains removed: "
    "every output bitwise the same"
)


def simplify_bundle_encoders(bundle_dir: Path, log: Callable[[str], None] = print, fused_attention: bool = False) -> dict:
    """Rewrite each distinct encoder file of the bundle at `bundle_dir` in place; returns bundle.json's
    `encoder_graph` record. Raises BuildError (nothing written) when any output differs."""
    from attnserve.service.engine.bundle import load_bundle

    bundle_dir = Path(bundle_dir)
    meta = load_bundle(bundle_dir).meta  # every hash checked before anything is rewritten
    pad_id, max_len = int(meta["special_ids"]["pad"]), int(meta["max_source_len"])
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
        write_proven(path, after, batches, pad_id, max_len, "the rewritten encoder is not bitwise the same")
        files[name] = {
            "nodes_before": files.get(name, {}).get("nodes_before", len(before.graph.node)),
            "nodes_after": len(after.graph.node),
            "ops_after": op_counts(after),
        }
        log(f"{name}: {len(before.graph.node)} -> {len(after.graph.node)} nodes, bitwise equal on {sum(map(len, batches))} rows")
    record["files"] = files
    record["checked"] = {
        "batches": list(BATCHES),
        "pad_extra": PAD_EXTRA,
        "padded_to_at_most": max_len,
        "inputs": "parity corpus source_ids",
    }
    meta["encoder_graph"] = record
    write_manifest(bundle_dir, meta)  # the hashes the fused-attention gate's bundles are loaded with
    if fused_attention:
        fused_rewrites(bundle_dir, meta, list(files), batches, log)
    return record


def fused_rewrites(bundle_dir: Path, meta: dict, names: list[str], batches: list, log: Callable[[str], None]) -> None:
    """The fused-attention gate, then QAttention and token packing where it passed, on encoders `names`; each
    recorded under meta's `encoder_graph` and the manifest written after each."""
    record = meta["encoder_graph"]
    pad_id, max_len = int(meta["special_ids"]["pad"]), int(meta["max_source_len"])
    record["fused_attention"] = dict(record.get("fused_attention", {}))  # a fused encoder keeps its gate's figures
    for name in names:
        record["fused_attention"][name] = fuse_attention_gated(bundle_dir, meta, name, log)
        write_manifest(bundle_dir, meta)  # the next gate loads this bundle, hashes checked
    record["fused_projections"] = dict(record.get("fused_projections", {}), rewrite=FUSED_PROJECTIONS)
    record["packed_tokens"] = dict(record.get("packed_tokens", {}), rewrite=PACKED_TOKENS)
    for name in names:
        fused = fuse_projections_proven(bundle_dir, name, batches, pad_id, max_len, log)
        if fused is not None:
            record["fused_projections"][name] = fused
        packed = pack_tokens_proven(bundle_dir, name, batches, pad_id, max_len, int(meta["config"]["d_model"]), log)
        if packed is not None:
            record["packed_tokens"][name] = packed
    write_manifest(bundle_dir, meta)


def fuse_projections_proven(
    bundle_dir: Path, name: str, batches: list, pad_id: int, max_len: int, log: Callable[[str], None]
) -> dict | None:
    """Encoder `name` with its Q, K, V projections and attention as QAttention, written only when every output is
    bitwise the same on `batches` (BuildError otherwise); its record (QAttention nodes, nodes before and after), or
    None when there was nothing to fuse (no MultiHeadAttention, or already fused)."""
    path = bundle_dir / name
    before = onnx.load(str(path))
    after, fused = fuse_qkv_attention(before)
    if not fused:
        log(f"{name}: no Q, K, V projections to fuse")
        return None
    write_proven(path, after, batches, pad_id, max_len, "the fused projections are not bitwise the same")
    log(f"{name}: Q, K, V of {fused} layers as QAttention, {len(before.graph.node)} -> {len(after.graph.node)} nodes, bitwise")
    return {"qattention": fused, "nodes_before": len(before.graph.node), "nodes_after": len(after.graph.node)}


def pack_tokens_proven(
    bundle_dir: Path, name: str, batches: list, pad_id: int, max_len: int, d_model: int, log: Callable[[str], None]
) -> dict | None:
    """Encoder `name` with its per-token nodes on the real tokens (export/graphs/encoder_pack.py), written only when
    every real position of every output is bitwise the same on `batches` and each parity-corpus row's outputs are
    bitwise the same alone and in a padded batch of 32 (BuildError otherwise); its record, or None when it has no
    fused attention or is packed already."""
    path = bundle_dir / name
    before = onnx.load(str(path))
    if not any(n.op_type in ATTENTION_OPS for n in before.graph.node) or any(INDEX in n.output for n in before.graph.node):
        return None
    after, counts = pack_tokens(before, d_model)
    sources = json.loads((bundle_dir / PARITY_CORPUS).read_text())["source_ids"]
    variant_rows = -1  # what the proof measured (write_proven calls batch_variant once)

    def batch_variant(candidate: Path) -> list[str]:
        nonlocal variant_rows
        variant_rows = batch_variant_rows(candidate, sources, pad_id, max_len)
        return [f"{variant_rows} rows batch-variant"] if variant_rows else []

    write_proven(path, after, batches, pad_id, max_len, "packed tokens differ", real_only=True, also=batch_variant)
    log(f"{name}: per-token nodes on real tokens only ({counts}), {len(before.graph.node)} -> {len(after.graph.node)} nodes")
    nodes = {"nodes_before": len(before.graph.node), "nodes_after": len(after.graph.node)}
    return {**counts, **nodes, "rows_not_batch_invariant": variant_rows}


def write_proven(
    path: Path,
    after: onnx.ModelProto,
    batches: list,
    pad_id: int,
    max_len: int,
    failure: str,
    real_only: bool = False,
    also: Callable[[Path], list[str]] | None = None,
) -> None:
    """Write the checked `after` over the encoder at `path` (stored as it was) only when its outputs are bitwise
    those of the graph it replaces on `batches` (at real positions only, with `real_only`) and `also` finds nothing
    wrong with the candidate; BuildError `failure` naming the first differences otherwise, nothing written."""
    onnx.checker.check_model(after)
    with tempfile.TemporaryDirectory() as tmp:
        candidate = Path(tmp) / path.name
        save_like(after, candidate, external_data_files(path))
        problems = compare_outputs(path, candidate, batches, pad_id, max_len=max_len, real_only=real_only)
        problems += also(candidate) if also is not None else []
        if problems:
            raise BuildError(f"{path.name}: {failure}: " + "; ".join(problems[:5]))
    save_like(after, path, external_data_files(path))


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


def encoder_feeds(
    rows: list[list[int]], pad_id: int = 0, extra: int = PAD_EXTRA, max_len: int | None = None
) -> dict[str, np.ndarray]:
    """input_ids and attention_mask [B, S] for `rows`, right-padded to the longest row plus `extra` positions,
    but not past `max_len` (the encoder's position table ends there: a wider feed is an out-of-range Gather)."""
    longest = max(map(len, rows))
    width = longest + extra if max_len is None else max(longest, min(longest + extra, max_len))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def compare_outputs(
    old: Path,
    new: Path,
    batches: list[list[list[int]]],
    pad_id: int = 0,
    threads: int = 1,
    max_len: int | None = None,
    real_only: bool = False,
) -> list[str]:
    """Where the two encoders' outputs differ in any bit (empty when they never do); each batch padded as
    `encoder_feeds` pads it, within `max_len`. `real_only`: each row's real positions only (the padding positions
    of the source axis, the last of `encoder_attention_bias` and the third of the cross K/V, not compared)."""
    import onnxruntime as ort

    from attnserve.service.engine.runtime import session_options

    sessions = [ort.InferenceSession(str(p), session_options(threads), providers=["CPUExecutionProvider"]) for p in (old, new)]
    names = [o.name for o in sessions[0].get_outputs()]
    if names != [o.name for o in sessions[1].get_outputs()]:
        return [f"outputs {names} became {[o.name for o in sessions[1].get_outputs()]}"]
    differences = []
    for rows in batches:
        feeds = encoder_feeds(rows, pad_id, max_len=max_len)
        for name, a, b in zip(names, *(s.run(None, feeds) for s in sessions)):
            if a.shape != b.shape or a.dtype != b.dtype:
                differences.append(f"{name} at batch {len(rows)}: {a.shape} {a.dtype} became {b.shape} {b.dtype}")
            elif real_only and not all(_real(name, a, r, len(row)) == _real(name, b, r, len(row)) for r, row in enumerate(rows)):
                differences.append(f"{name} at batch {len(rows)} (first row {rows[0]}), real positions")
            elif not real_only and a.tobytes() != b.tobytes():
                differences.append(f"{name} at batch {len(rows)} (first row {rows[0]})")
    return differences


def _real(name: str, output: np.ndarray, row: int, length: int) -> bytes:
    """Row `row`'s first `length` source positions of encoder output `name`, as bytes."""
    return (output[row, ..., :length] if name == ENCODER_ATTENTION_BIAS else output[row, :, :length]).tobytes()


def fuse_attention_gated(bundle_dir: Path, meta: dict, name: str, log: Callable[[str], None]) -> dict:
    """Rewrite encoder `name` with MultiHeadAttention where the gate passes; the gate's figures either way."""

    config = meta["config"]
    path = bundle_dir / name
    model = onnx.load(str(path))
    if any(node.op_type in ATTENTION_OPS for node in model.graph.node):
        log(f"{name}: self-attention already fused")
        return meta.get("encoder_graph", {}).get("fused_attention", {}).get(name, {"applied": True})
    if not any(node.domain == "com.microsoft" for node in model.graph.node):
        log(f"{name}: standard operators only, left so")
        return {"applied": False, "reason": STANDARD_ONLY}
    candidate = fuse_self_attention(model, config["n_encoder_layers"], config["n_heads"], config["d_model"])
    sources = json.loads((bundle_dir / PARITY_CORPUS).read_text())["source_ids"]
    pad_id = int(meta["special_ids"]["pad"])
    variants = [v for v, entry in meta["variants"].items() if entry["encoder"] == name]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / bundle_dir.name
        shutil.copytree(bundle_dir, work)
        save_like(candidate, work / name, external_data_files(path))
        write_manifest(work, json.loads((work / BUNDLE_JSON).read_text()))
        gate = {
            "rows_not_batch_invariant": batch_variant_rows(work / name, sources, pad_id, int(meta["max_source_len"])),
            "greedy_agreement_pct": {v: greedy_agreement(bundle_dir, work, v, sources) for v in variants},
            "nodes": len(candidate.graph.node),
        }
        gate["applied"] = not gate["rows_not_batch_invariant"] and all(
            pct >= MIN_AGREEMENT_PCT for pct in gate["greedy_agreement_pct"].values()
        )
        if gate["applied"]:
            shutil.copyfile(work / name, path)
            for data in external_data_files(path):
                shutil.copyfile(work / data, bundle_dir / data)
    log(f"{name}: fused attention {'kept' if gate['applied'] else 'NOT kept'}: {gate}")
    return gate


def batch_variant_rows(path: Path, sources: list[list[int]], pad_id: int, max_len: int | None = None) -> int:
    """How many rows' valid outputs differ in any bit between the row alone and in a padded batch of 32."""
    import onnxruntime as ort

    from attnserve.service.engine.runtime import session_options

    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    differing = 0
    for start in range(0, len(sources), 32):
        rows = sources[start : start + 32]
        batched = session.run(None, encoder_feeds(rows, pad_id, max_len=max_len))
        for r, row in enumerate(rows):
            alone = session.run(None, encoder_feeds([row], pad_id, extra=0))
            n = len(row)
            bias_same = alone[0][0, ..., :n].tobytes() == batched[0][r, ..., :n].tobytes()
            kv_same = all(a[0, :, :n].tobytes() == b[r, :, :n].tobytes() for a, b in zip(alone[1:], batched[1:]))
            differing += not (bias_same and kv_same)
    return differing


def greedy_agreement(old: Path, new: Path, variant: str, sources: list[list[int]]) -> float:
    """Percentage of sources whose greedy answer from variant `variant` is the same in both bundles."""
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import DecodingOptions, Engine

    answers = []
    for bundle_dir in (old, new):
        engine = Engine(load_bundle(bundle_dir), variant=variant, threads=1)
        options = DecodingOptions(max_new_tokens=engine.max_target_len)
        answers.append([r.text for r in engine.generate(sources, options, batch_size=64, refill=True)])
    return 100.0 * sum(a == b for a, b in zip(*answers)) / len(sources)
