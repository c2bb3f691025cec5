"""`attnserve-bench`: decoding speed side by side, in-process (no HTTP).

Backends, all greedy (or all beam search of one width, `--beam`), measured in one run on the same inputs:
- torch-nocache: PyTorch recomputing the whole prefix every step;
- torch-cache:   PyTorch with the KV cache (training/decode.py);
- ort-fp32 / ort-int8: the service's ONNX Runtime engine (service/engine/engine.py); ort-int8 is the served
  int8, the v2 fused decoder over an in-place cache (export/graphs/v2.py); ort-int8-v1 the v1 int8 graph;
- ct2-fp32 / ct2-int8: the same weights in CTranslate2 (export/ct2.py), the speed target.
For batch sizes (default 1 and 32) and output lengths (default 8, 32, 128).

Output length is forced: eos is suppressed until N tokens (`min_new_tokens`) and
generation stops at N, so every row decodes exactly N tokens. Cost per step does
not depend on what the weights say, so by default the model is the default
model's architecture (configs/g2p.yaml: 3+3 layers, 256 wide) with random
weights and max_target_len 128: a synthetic task that reaches 128 tokens, which
the G2P model (48 positions) cannot. `--size translation` resizes that synthetic
model to a translation model's shape (6+6 layers, 512 wide, 8 heads, d_ff 2048,
8,000 target tokens), to see whether a ratio holds as the model grows.
`--run/--bundle` measure a trained model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

from attnserve.export.graphs.format import OPSET, graph_io
from attnserve.export.pipeline.calibration import write_int8
from attnserve.export.pipeline.manifest import PARITY_CORPUS, TOKENIZERS, VARIANT_FILES, write_manifest
from attnserve.export.pipeline.simplify_encoder import simplify_bundle_encoders
from attnserve.export.pipeline.v2 import write_v2_variants
from attnserve.service.engine.bundle import V2_FORMAT_VERSION, load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.runtime import cpu_model
from attnserve.training.config import ModelConfig
from attnserve.training.tokenize import SPECIAL_TOKENS, build_tokenizer

BACKENDS = ("torch-nocache", "torch-cache", "ort-fp32", "ort-int8", "ort-int8-v1", "ct2-fp32", "ct2-int8")
# the bundle variant each ONNX Runtime backend runs: ort-int8 is the served int8 (the v2 fused decoder over an
# in-place cache), ort-int8-v1 the v1 int8 graph it replaced, kept for comparison
ORT_VARIANTS = {"ort-fp32": "fp32", "ort-int8": "int8", "ort-int8-v1": "int8-v1"}


@dataclass(frozen=True)
class SyntheticSize:
    """The shape of the synthetic model; `tgt_tokens` counts the target vocabulary, special tokens included
    (the output projection and the token choice grow with it)."""

    d_model: int
    n_heads: int
    d_ff: int
    n_encoder_layers: int
    n_decoder_layers: int
    tgt_tokens: int


# "default": configs/g2p.yaml's architecture (68 phonemes + 4 special tokens); "translation": the base
# Transformer's shape with a sentence-piece-sized target vocabulary
SIZES = {
    "default": SyntheticSize(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, tgt_tokens=72),
    "translation": SyntheticSize(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6, n_decoder_layers=6, tgt_tokens=8000),
}


def synthetic_pairs(n: int = 200, seed: int = 0, tgt_words: int = 68) -> list[tuple[str, str]]:
    """Random letter strings and target-word strings: calibration pairs for the synthetic model's int8."""
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return [
        (
            "".join(rng.choice(letters, rng.integers(3, 14))),
            " ".join(f"P{i}" for i in rng.integers(0, tgt_words, rng.integers(3, 14))),
        )
        for _ in range(n)
    ]


def synthetic_tokenizers(size: SyntheticSize):
    """A character source tokenizer and a whitespace target tokenizer of `size.tgt_tokens` tokens (P0, P1, ...)."""
    src_tok = build_tokenizer(["abcdefghijklmnopqrstuvwxyz'"], "char", lowercase=True)
    tgt_tok = build_tokenizer([" ".join(f"P{i}" for i in range(size.tgt_tokens - len(SPECIAL_TOKENS)))], "whitespace")
    return src_tok, tgt_tok


def synthetic_run(work: Path, max_target_len: int = 128, size: SyntheticSize = SIZES["default"]):
    """A random-initialised model of `size` (default: the default model's), and a bundle of it: fp32 (v1), int8
    (v2, as served) and int8-v1, all written by the export code that builds real bundles."""
    # torch and training only when the bench runs: attnserve-gpu-check imports this module without them
    import torch

    from attnserve.export.graphs.v1 import export_decoder, export_encoder
    from attnserve.training.model import Transformer

    src_tok, tgt_tok = synthetic_tokenizers(size)
    cfg = ModelConfig(
        src_vocab_size=src_tok.get_vocab_size(),
        tgt_vocab_size=tgt_tok.get_vocab_size(),
        d_model=size.d_model,
        n_heads=size.n_heads,
        d_ff=size.d_ff,
        n_encoder_layers=size.n_encoder_layers,
        n_decoder_layers=size.n_decoder_layers,
        max_source_len=48,
        max_target_len=max_target_len,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    work.mkdir(parents=True, exist_ok=True)
    export_encoder(model, work / "encoder.onnx")
    export_decoder(model, work / "decoder.onnx")
    pairs = synthetic_pairs(tgt_words=size.tgt_tokens - len(SPECIAL_TOKENS))
    write_int8(work, VARIANT_FILES["fp32"], VARIANT_FILES["int8"], src_tok, tgt_tok, cfg.to_dict(), pairs, log=lambda _: None)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    encoders = {p: VARIANT_FILES[p]["encoder"] for p in ("fp32", "int8")}
    v2 = write_v2_variants(work, cfg.to_dict(), state, encoders, src_tok, tgt_tok, pairs, log=lambda _: None)
    src_tok.save(str(work / TOKENIZERS["source"]))
    tgt_tok.save(str(work / TOKENIZERS["target"]))
    meta = {
        "format_version": V2_FORMAT_VERSION,
        "model_id": "bench-synthetic",
        "config": cfg.to_dict(),
        "special_ids": {"pad": cfg.pad_id, "bos": cfg.bos_id, "eos": cfg.eos_id, "unk": cfg.unk_id},
        "max_source_len": cfg.max_source_len,
        "max_target_len": cfg.max_target_len,
        "opset": OPSET,
        "io": {
            **{g: graph_io(work / f"{g}.onnx") for g in ("encoder", "decoder")},
            "decoder_v2": graph_io(work / v2["int8"]["decoder"]),
        },
        "variants": {
            "fp32": {**VARIANT_FILES["fp32"], "kv_cache": "concat"},
            "int8": v2["int8"],
            "int8-v1": {**VARIANT_FILES["int8"], "kv_cache": "concat"},
        },
        "default_variant": {"cpu": "fp32", "cuda": "fp32"},
        "tokenizers": dict(TOKENIZERS),
    }
    # The encoders as `attnserve-export build` leaves them (shape plumbing rewritten, int8's self-attention
    # fused where its gate passes), proven on random sources of the bench's lengths, so the bench times what
    # a bundle serves.
    rng = np.random.default_rng(1)
    sources = [rng.integers(4, src_tok.get_vocab_size(), int(n)).tolist() for n in rng.integers(5, 12, 200)]
    (work / PARITY_CORPUS).write_text(json.dumps({"source_ids": sources}) + "\n")
    write_manifest(work, meta)
    simplify_bundle_encoders(work, log=lambda _: None, fused_attention=True)
    return model, work


def machine_info(threads: int) -> dict:
    cpu = cpu_model()
    return {
        "cpu": cpu,
        "cpus_visible": os.cpu_count(),
        "threads_used": threads,
        "gpu": "none",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": list(os.getloadavg()),
    }


def run_bench(
    model,
    bundle_dir: Path,
    lengths: list[int],
    batches: list[int],
    backends: list[str],
    threads: int,
    repeats: int,
    work_dir: Path,
    max_seconds_per_cell: float = 20.0,
    log=print,
    spin: bool = False,
    beam: int = 1,
) -> dict:
    """Every backend at every (output length, batch) cell: open the backends, warm them up, time each cell,
    then compare tokens/s across backends."""
    import torch  # torch only when the bench runs: attnserve-gpu-check imports this module without it

    torch.set_num_threads(threads)
    bundle = load_bundle(bundle_dir)
    once, backends, kv_caches = open_backends(model, bundle, backends, threads, work_dir, spin, beam)
    rng = np.random.default_rng(0)
    src_v = int(bundle.config["src_vocab_size"])
    sources = [rng.integers(4, src_v, int(n)).tolist() for n in rng.integers(5, 12, max(batches))]  # word-like lengths
    for backend in backends:  # warm-up: first-run allocations and lazy initialisation
        once(backend, sources[:2], 4)
    cells = []
    for n in lengths:
        for b in batches:
            cells += time_cell(once, backends, kv_caches, sources[:b], n, repeats, max_seconds_per_cell, log)
    return bench_report(bundle, beam, cells, lengths, batches)


def open_backends(model, bundle, backends: list[str], threads: int, work_dir: Path, spin: bool, beam: int):
    """Load every requested backend; returns `once(backend, ids, n) -> (wall s, cpu s, tokens produced)`, the
    backends this bundle can run (a trained bundle has no int8-v1) and the KV cache kind of each ORT backend."""
    from attnserve.training.decode import generate_ids  # torch: only when the bench runs, not for attnserve-gpu-check

    engines = {
        b: Engine(bundle, variant=ORT_VARIANTS[b], provider="cpu", threads=threads, spin=spin)
        for b in backends
        if b.startswith("ort-") and ORT_VARIANTS[b] in bundle.variants
    }
    backends = [b for b in backends if not b.startswith("ort-") or b in engines]  # a trained bundle has no int8-v1
    ct2 = {}
    if any(b.startswith("ct2-") for b in backends):
        from attnserve.export import ct2 as ct2_mod  # torch and ctranslate2: only when a ct2 backend is asked for

        src_tok = Tokenizer.from_file(str(bundle.src_tokenizer_path))
        tgt_tok = Tokenizer.from_file(str(bundle.tgt_tokenizer_path))
        for b in backends:
            if b.startswith("ct2-"):
                quant = {"ct2-fp32": "float32", "ct2-int8": "int8"}[b]
                path = ct2_mod.convert(model, src_tok, tgt_tok, Path(work_dir) / b, quant)
                ct2[b] = ct2_mod.translator(path, threads)

    def once(backend: str, ids: list[list[int]], n: int) -> tuple[float, float, int]:
        opts = DecodingOptions(max_new_tokens=n, min_new_tokens=n, num_beams=beam if beam > 1 else None)
        c = time.process_time()
        t = time.perf_counter()
        if backend.startswith("torch"):
            out = generate_ids(model, ids, opts, use_cache=backend == "torch-cache")
            produced = sum(len(x) for x in out)
        elif backend.startswith("ct2"):
            out = ct2_mod.generate(ct2[backend], src_tok, tgt_tok, ids, n, min_len=n, beam_size=beam)
            produced = sum(len(x) for x in out)
        else:
            out = engines[backend].generate(ids, opts, batch_size=len(ids) * beam)
            produced = sum(r.generated_tokens for r in out)
        return time.perf_counter() - t, time.process_time() - c, produced

    return once, backends, {b: e.kv_cache for b, e in engines.items()}


def time_cell(once, backends: list[str], kv_caches: dict, ids: list[list[int]], n: int, repeats: int, max_seconds: float, log):
    """One (output length, batch) cell: `repeats` timed runs of every backend, interleaved; one result row each."""
    b = len(ids)
    for backend in backends:  # per-shape warm-up (arena growth), except the one slow cell
        if not (backend == "torch-nocache" and b * n * n > 32 * 32 * 32):
            once(backend, ids, n)
    wall: dict[str, list[float]] = {k: [] for k in backends}
    cpu: dict[str, list[float]] = {k: [] for k in backends}
    for _ in range(repeats):  # backends interleaved, so drifting background load hits all alike
        for backend in backends:
            if sum(wall[backend]) > max_seconds:  # keep the shared machine usable
                continue
            w, c, produced = once(backend, ids, n)
            if produced != b * n:
                raise RuntimeError(f"{backend} produced {produced} tokens, expected {b * n}")
            wall[backend].append(w)
            cpu[backend].append(c)
    cells = []
    for backend in backends:
        best = min(wall[backend])  # the run least disturbed by other load
        cell = {
            "backend": backend,
            **({"kv_cache": kv_caches[backend]} if backend in kv_caches else {}),
            "batch": b,
            "output_len": n,
            "runs": len(wall[backend]),
            "seconds_best": round(best, 5),
            "seconds_median": round(statistics.median(wall[backend]), 5),
            "seconds_all": [round(x, 5) for x in wall[backend]],
            "ms_per_step": round(1000 * best / n, 3),  # per generated token of each sequence
            "tokens_per_s": round(b * n / best, 1),
            # CPU time of this process: less sensitive than wall time to other load on a shared machine
            "cpu_seconds_best": round(min(cpu[backend]), 5),
            "cpu_ms_per_step": round(1000 * min(cpu[backend]) / n, 3),
        }
        cells.append(cell)
        log(
            f"[bench] {backend:14s} batch {b:3d} len {n:4d}: {cell['ms_per_step']:9.3f} ms/step "
            f"{cell['tokens_per_s']:10.1f} tok/s (cpu {cell['cpu_ms_per_step']:.3f} ms/step)"
        )
    return cells


def bench_report(bundle, beam: int, cells: list[dict], lengths: list[int], batches: list[int]) -> dict:
    """The report: the model, library versions, every cell, and each cell's tokens/s relative to each baseline."""
    import torch  # torch only when the bench runs: attnserve-gpu-check imports this module without it

    ratios = []
    for n in lengths:
        for b in batches:
            row = {c["backend"]: c["tokens_per_s"] for c in cells if c["batch"] == b and c["output_len"] == n}
            entry = {"batch": b, "output_len": n}
            for base in ("torch-nocache", "torch-cache", "ort-fp32", "ct2-fp32", "ct2-int8"):
                if base in row:
                    entry[f"vs_{base}"] = {k: round(v / row[base], 2) for k, v in row.items() if k != base}
            ratios.append(entry)
    return {
        "beam_size": beam,
        "model": {k: bundle.config[k] for k in ("d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers")}
        | {"tgt_vocab_size": bundle.config["tgt_vocab_size"], "model_id": bundle.model_id},
        "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        # which encoder graphs ran: nodes before and after the rewrite, and whether int8's fused attention was kept
        "encoder_graph": bundle.meta.get("encoder_graph", {}),
        "results": cells,
        "ratios_tokens_per_s": ratios,
    }


def markdown(report: dict) -> str:
    backends = list(dict.fromkeys(c["backend"] for c in report["results"]))
    pairs = [("ort-fp32", "torch-cache"), ("ort-fp32", "torch-nocache"), ("ort-fp32", "ct2-fp32"), ("ort-int8", "ct2-int8")]
    pairs = [(a, b) for a, b in pairs if a in backends and b in backends]
    head = " | ".join(f"{b} ms/step (tok/s)" for b in backends) + "".join(f" | {a} / {b}" for a, b in pairs)
    lines = [f"| batch | output len | {head} |", "|---|---|" + "---|" * (len(backends) + len(pairs))]
    for r in report["ratios_tokens_per_s"]:
        cells = {c["backend"]: c for c in report["results"] if c["batch"] == r["batch"] and c["output_len"] == r["output_len"]}
        vals = [f"{cells[b]['ms_per_step']:.2f} ({cells[b]['tokens_per_s']:.0f})" for b in backends]
        vals += [f"{r[f'vs_{b}'][a]:.2f}x" for a, b in pairs]
        lines.append(f"| {r['batch']} | {r['output_len']} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.beam < 1:
        print("error: --beam must be >= 1", file=sys.stderr)
        return 2
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
        batches = [int(x) for x in args.batches.split(",")]
    except ValueError:
        print("error: --lengths and --batches take comma-separated integers", file=sys.stderr)
        return 2
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        print(f"error: unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}", file=sys.stderr)
        return 2
    if bool(args.run) != bool(args.bundle):
        print("error: --run and --bundle go together (the bundle exported from that run)", file=sys.stderr)
        return 2
    if args.run and args.size != "default":
        print("error: --size resizes the synthetic model; a trained --run has its own size", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    info = machine_info(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            from attnserve.training.run import load_model  # torch: only when the bench runs

            model, bundle_dir = load_model(args.run), args.bundle
            limit = model.cfg.max_target_len
            if max(lengths) > limit:
                print(f"error: this model generates at most {limit} tokens; lower --lengths", file=sys.stderr)
                return 2
        else:
            size = SIZES[args.size]
            model, bundle_dir = synthetic_run(Path(tmp) / "bundle", max_target_len=max(max(lengths), 8), size=size)
        report = run_bench(
            model,
            bundle_dir,
            lengths,
            batches,
            backends,
            args.threads,
            args.repeats,
            Path(tmp),
            log=_log,
            spin=args.spin,
            beam=args.beam,
        )
    info["load_average_at_end"] = list(os.getloadavg())
    report = {
        "command": "attnserve-bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model_kind": "trained run" if args.run else f"synthetic: {args.size} size, random weights, forced lengths",
        **({} if args.run else {"size": {"name": args.size, **asdict(SIZES[args.size])}}),
        "onnxruntime_spinning": args.spin,
        "machine": info,
        **report,
        "seconds_total": round(time.perf_counter() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    _log(f"[bench] raw JSON written to {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnserve-bench", description="Decoding speed: PyTorch (no cache, cache) vs ONNX Runtime.")
    p.add_argument("--run", type=Path, help="a trained run (with --bundle built from it) instead of the synthetic model")
    p.add_argument("--bundle", type=Path, help="the bundle exported from --run")
    p.add_argument("--lengths", default="8,32,128", help="output lengths (comma-separated)")
    p.add_argument("--batches", default="1,32", help="batch sizes (comma-separated)")
    p.add_argument("--backends", default=",".join(BACKENDS), help=f"subset of {','.join(BACKENDS)} (ct2-*: the dev extra)")
    p.add_argument("--threads", type=int, default=1, help="threads for PyTorch and ONNX Runtime alike (default 1)")
    p.add_argument("--repeats", type=int, default=5, help="runs per cell (best reported; a slow cell stops early)")
    p.add_argument("--out", type=Path, default=Path("bench.json"), help="raw JSON report")
    p.add_argument("--spin", action="store_true", help="let ONNX Runtime's worker threads spin (the engine's default is off)")
    p.add_argument("--beam", type=int, default=1, help="beam search of this width in every backend (default 1: greedy)")
    p.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="default",
        help="the synthetic model's shape: default (3+3 layers, 256 wide, 72 target tokens) or translation "
        "(6+6 layers, 512 wide, 8 heads, d_ff 2048, 8,000 target tokens); not with --run",
    )
    return p


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":  # python -m attnserve.export.bench, as attnserve-bench
    sys.exit(main())
