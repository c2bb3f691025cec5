"""The bench step: the served variant (fp16 v2 on CUDA) against fp32 v1, and PyTorch's cached decoder when torch is
importable, at each batch size x output length (export/bench.py's cells)."""

from __future__ import annotations

import time

import numpy as np

from attnserve.export.gpu_check.verify import open_engine

BATCHES = (1, 32, 128)


LENGTHS = (8, 32, 128)


def step_bench(ctx: dict) -> dict:
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    from attnserve.export.bench import time_cell
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import DecodingOptions

    bundle = load_bundle(ctx.get("bundle_copy") or ctx["bundle"])
    limit = bundle.max_target_len
    lengths = sorted({min(n, limit) for n in ctx["lengths"]})
    batches = list(ctx["batches"])
    names = {"cuda": {"ort-fp16-v2": "fp16", "ort-fp32-v1": "fp32"}, "cpu": {"ort-int8": "int8", "ort-fp32-v1": "fp32"}}
    engines, fallbacks, failures = {}, {}, []
    for backend, variant in names[ctx["provider"]].items():
        if variant not in bundle.variants:
            failures.append(f"{backend}: the bundle has no {variant!r} variant (did the variant step fail?)")
            continue
        try:
            engines[backend], fb = open_engine(bundle, variant, ctx["provider"], ctx["threads"])
        except Exception as e:  # one backend that cannot run leaves the others measured
            failures.append(f"{backend}: {type(e).__name__}: {str(e).strip()[:300]}")
            continue
        if fb:
            fallbacks[backend] = fb
    torch_model, torch_note = None, "PyTorch is compared on CUDA only"
    if ctx["provider"] == "cuda":
        try:
            torch_model, torch_note = torch_reference(bundle, ctx["provider"])
        except Exception as e:
            torch_note = f"PyTorch column skipped: {type(e).__name__}: {str(e).strip()[:300]}"

    def once(backend: str, ids: list[list[int]], n: int) -> tuple[float, float, int]:
        opts = DecodingOptions(max_new_tokens=n, min_new_tokens=n)
        c, t = time.process_time(), time.perf_counter()
        if backend == "torch-cache":
            # torch is optional on a GPU host: without it the PyTorch column is skipped, not the step
            from attnserve.training.decode import generate_ids

            produced = sum(len(x) for x in generate_ids(torch_model, ids, opts, use_cache=True))
            sync_torch()
        else:
            produced = sum(r.generated_tokens for r in engines[backend].generate(ids, opts, batch_size=len(ids)))
        return time.perf_counter() - t, time.process_time() - c, produced

    rng = np.random.default_rng(0)
    src_v = int(bundle.config["src_vocab_size"])
    sources = [rng.integers(4, src_v, int(k)).tolist() for k in rng.integers(5, 12, max(batches))]
    backends = []
    for backend in list(engines) + (["torch-cache"] if torch_model is not None else []):
        try:  # warm-up; a backend that fails here is reported and left out of the cells
            once(backend, sources[:2], 4)
            backends.append(backend)
        except Exception as e:
            failures.append(f"{backend}: {type(e).__name__}: {str(e).strip()[:300]}")
    kv_caches = {k: e.kv_cache for k, e in engines.items()}
    cells = ctx.setdefault("partial", {}).setdefault("bench", [])  # what a step past its time bound still reports
    for n in lengths:
        for b in batches:
            try:
                cells += time_cell(once, backends, kv_caches, sources[:b], n, ctx["repeats"], 20.0, lambda _line: None)
            except Exception as e:
                failures.append(f"batch {b} x {n} tokens: {type(e).__name__}: {str(e).strip()[:300]}")
    return {
        "provider": ctx["provider"],
        "lengths": lengths,
        "lengths_asked": list(ctx["lengths"]),
        "note": f"output lengths capped at the model's max_target_len ({limit})" if max(ctx["lengths"]) > limit else "",
        "batches": batches,
        "backends": {b: {"variant": e.variant, "provider": e.provider, "kv_cache": e.kv_cache} for b, e in engines.items()},
        "fallbacks": fallbacks,
        "torch": torch_note,
        "results": cells,
        "failures": failures,
    }


def torch_reference(bundle, provider: str):
    """PyTorch's cached decoder with the bundle's weights (training/weights.py), on the GPU for cuda; (None, why)
    when torch is not importable here."""
    try:
        # torch is optional on a GPU host: without it the PyTorch column is skipped, not the step
        import torch
    except ImportError:
        return None, "torch not importable: PyTorch column skipped"
    try:  # PyTorch's decode loop lives with training, whose metrics need the train extra (rapidfuzz and the rest)
        from attnserve.training.config import ModelConfig
        from attnserve.training.decode import generate_ids  # noqa: F401  (imported here so a missing module skips the column)
        from attnserve.training.model import Transformer
        from attnserve.training.weights import load_bundle_weights
    except ImportError as e:
        return None, f"PyTorch column skipped: training's decode loop needs {e.name or e} (the train extra)"

    device = "cuda" if provider == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device: PyTorch column skipped"
    config, state = load_bundle_weights(bundle.dir)
    model = Transformer(ModelConfig.from_dict(config))
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    model = model.to(device).eval()
    return model, f"torch {torch.__version__} on {device}"


def sync_torch() -> None:
    # torch is optional on a GPU host: without it the PyTorch column is skipped, not the step
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
