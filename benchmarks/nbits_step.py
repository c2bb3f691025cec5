"""Is a weight-only int8 (or int4) decoder faster than the served one at small batches? The served v2 int8 decoder
(uint8 activations x int8 weights, MatMulIntegerToFloat) against the same v2 graph with every weight MatMul made
`MatMulNBits` (float32 activations, weights quantized per block; ONNX Runtime's MLAS serves it with kernels made
for one row), timed by the engine, interleaved A B A B, on the bench's synthetic model (the default shape).

    taskset -c 0 python -m benchmarks.nbits_step --bits 8 --block 32 --out benchmarks/results/nbits_step.json

The weights are quantized here by hand (symmetric per block, zero point 2^(bits-1)), so no extra package is needed.
Greedy answers of the two decoders are compared on the bench's sources.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from attnserve.export.bench import SIZES, machine_info, synthetic_run
from attnserve.export.graphs.v2 import decoder_v2_model
from attnserve.export.pipeline.manifest import write_manifest
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine


def quantize_block(w: np.ndarray, bits: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """A MatMul weight [K, N] as MatMulNBits wants it: (codes [N, blocks, block * bits / 8] uint8, scales [N * blocks])."""
    k, n = w.shape
    blocks = -(-k // block)
    wt = np.zeros((n, blocks * block), np.float32)
    wt[:, :k] = w.T
    wb = wt.reshape(n, blocks, block)
    qmax = (1 << (bits - 1)) - 1
    amax = np.abs(wb).max(-1)
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    codes = (np.clip(np.rint(wb / scale[..., None]), -qmax, qmax) + (1 << (bits - 1))).astype(np.uint8)
    if bits == 4:  # two codes a byte, the first in the low nibble
        codes = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return codes, scale.reshape(-1)


def nbits_decoder(model: onnx.ModelProto, bits: int, block: int, accuracy_level: int) -> onnx.ModelProto:
    """Every MatMul with a constant weight replaced by MatMulNBits; the rest of the graph unchanged."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes, dropped = [], set()
    for node in g.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
        codes, scales = quantize_block(w, bits, block)
        b_name, s_name = f"{node.input[1]}/nbits", f"{node.input[1]}/scales"
        g.initializer.extend([numpy_helper.from_array(codes, b_name), numpy_helper.from_array(scales, s_name)])
        dropped.add(node.input[1])
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                [node.input[0], b_name, s_name],
                list(node.output),
                name=f"{node.name}/nbits",
                domain="com.microsoft",
                K=w.shape[0],
                N=w.shape[1],
                bits=bits,
                block_size=block,
                accuracy_level=accuracy_level,
            )
        )
    kept = [t for t in g.initializer if t.name not in dropped]
    del g.node[:], g.initializer[:]
    g.node.extend(nodes)
    g.initializer.extend(kept)
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.nbits_step", description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, choices=(4, 8), default=8)
    p.add_argument("--block", type=int, default=32, help="weights per quantization block (a power of two >= 16)")
    p.add_argument("--accuracy-level", type=int, default=4, help="MatMulNBits accuracy_level (4: int8 compute)")
    p.add_argument("--batches", default="1,4,32")
    p.add_argument("--lengths", default="8,32,128")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("nbits_step.json"))
    args = p.parse_args(argv)
    batches, lengths = [int(x) for x in args.batches.split(",")], [int(x) for x in args.lengths.split(",")]
    name = f"nbits{args.bits}"
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        model, served = synthetic_run(Path(tmp) / "served", max_target_len=max(lengths), size=SIZES["default"])
        bundle = load_bundle(served)
        state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        alt = Path(tmp) / name
        shutil.copytree(served, alt)
        decoder = nbits_decoder(decoder_v2_model(bundle.config, state), args.bits, args.block, args.accuracy_level)
        onnx.save(decoder, str(alt / bundle.variants["int8"]["decoder"]))
        meta = json.loads((alt / "bundle.json").read_text())
        meta.pop("manifest_sha256", None)
        write_manifest(alt, meta)  # the decoder's new hash
        dirs = {"int8": served, name: alt}
        engines = {k: Engine(load_bundle(d), variant="int8", provider="cpu", threads=1) for k, d in dirs.items()}
        rng = np.random.default_rng(0)
        src_v = int(bundle.config["src_vocab_size"])
        sources = [rng.integers(4, src_v, int(n)).tolist() for n in rng.integers(5, 12, max(batches))]
        for b in batches:
            for n in lengths:
                opts = DecodingOptions(max_new_tokens=n, min_new_tokens=n)
                best = {}
                for e in engines.values():
                    e.generate(sources[:b], opts, batch_size=b)
                for _ in range(args.repeats):  # interleaved: load drifting on a shared machine hits both alike
                    for k, e in engines.items():
                        t = time.perf_counter()
                        e.generate(sources[:b], opts, batch_size=b)
                        best[k] = min(best.get(k, float("inf")), time.perf_counter() - t)
                cell = {"batch": b, "output_len": n, **{f"{k}_ms_per_step": round(1000 * v / n, 4) for k, v in best.items()}}
                cell["int8_time_over_nbits"] = round(best["int8"] / best[name], 3)  # > 1: MatMulNBits faster
                cells.append(cell)
                print(json.dumps(cell), flush=True)
        opts = DecodingOptions(max_new_tokens=max(lengths))
        answers = {k: [r.token_ids for r in e.generate(sources, opts)] for k, e in engines.items()}
    agree = sum(a == c for a, c in zip(answers["int8"], answers[name], strict=True))
    machine = machine_info(1)
    machine["load_average_at_end"] = list(os.getloadavg())
    report = {
        "command": "python -m benchmarks.nbits_step " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine,
        "variant": {"bits": args.bits, "block": args.block, "accuracy_level": args.accuracy_level},
        "cells": cells,
        "greedy_agreement": {"same": agree, "of": len(sources)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"greedy answers the same: {agree} of {len(sources)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
