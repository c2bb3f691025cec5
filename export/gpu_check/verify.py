"""The variant and verify steps: `add-variant fp16` on a copy of the bundle, then on the device greedy, seeded
sampling and beam 4 alone, in static and in continuous batches, greedy against the fp32 reference, and where
the cache and cross K/V live."""

from __future__ import annotations

import json
import shutil

import numpy as np


def step_variant(ctx: dict) -> dict:
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    from attnserve.export.pipeline.add_variant import FILES, add_variant

    copy = ctx["work"] / "bundle"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(ctx["bundle"], copy, ignore=shutil.ignore_patterns("*.partial"))
    lines: list[str] = []
    meta = add_variant(copy, "fp16", provider="cpu", threads=ctx["threads"], log=lines.append)
    ctx["bundle_copy"] = copy
    size = sum((copy / f).stat().st_size for f in FILES.values())
    return {
        "bundle_copy": str(copy),
        "fp16_files": {f: (copy / f).stat().st_size for f in FILES.values()},
        "fp16_bytes": size,
        "default_variant": meta["default_variant"],
        "checks_on_cpu": meta["parity"]["fp16"],
        "log": lines,
    }


def open_engine(bundle, variant: str, provider: str, threads: int | None):
    """The engine of `variant`; one that cannot run here falls back to its v1 variant (reported, not a failure)."""
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    from attnserve.service.engine.bundle import BundleError
    from attnserve.service.engine.engine import Engine

    try:
        return Engine(bundle, variant=variant, provider=provider, threads=threads), None
    except BundleError as e:
        fallback = bundle.fallback(variant) if variant in bundle.variants else None
        if not fallback:
            raise
        engine = Engine(bundle, variant=fallback, provider=provider, threads=threads)
        return engine, {"asked": variant, "served": fallback, "reason": str(e)}


def variants_to_check(ctx: dict) -> list[str]:
    return ["fp16"] if ctx["provider"] == "cuda" else ["int8", "fp32"]


def step_verify(ctx: dict) -> dict:
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    from attnserve.export.checks.fp16 import agreement
    from attnserve.service.engine.bundle import load_bundle

    bundle = load_bundle(ctx.get("bundle_copy") or ctx["bundle"])
    corpus = json.loads((bundle.dir / bundle.meta.get("parity_corpus", "parity_corpus.json")).read_text())
    out: dict = {"bundle": str(bundle.dir), "inputs": len(corpus["source_ids"])}
    failures: list[str] = []
    for name in variants_to_check(ctx):
        if name not in bundle.variants:
            failures.append(f"the bundle has no {name!r} variant (did the variant step fail?)")
            continue
        engine, fallback = open_engine(bundle, name, ctx["provider"], ctx["threads"])
        r: dict = {"variant": engine.variant, "provider": engine.provider, "kv_cache": engine.kv_cache}
        if fallback:
            r["fallback"] = fallback
            if ctx["provider"] == "cuda":  # the CUDA variant itself must run: its fallback proves nothing about it
                failures.append(f"{name} cannot run on CUDA here; {fallback['served']} served instead: {fallback['reason']}")
        if ctx["provider"] == "cuda" and engine.provider != "CUDAExecutionProvider":
            failures.append(f"{name}: served by {engine.provider}, not CUDA")
        out[name] = r

        def attempt(label: str, fn, r=r, engine=engine):
            """One check of this variant; an exception is recorded and the next check still runs."""
            try:
                fn()
            except Exception as e:
                r[f"{label}_error"] = f"{type(e).__name__}: {str(e).strip()[:400]}"
                failures.append(f"{engine.variant} {label}: {r[f'{label}_error']}")

        def check_invariance(r=r, engine=engine):
            inv = invariance(engine, corpus)
            r["invariance"] = inv
            differ = {k: v["differ"] for k, v in inv.items() if v["differ"]}
            if differ and engine.device == "cpu":
                failures.append(f"{engine.variant}: answers depend on the batch on the CPU: {differ}")
            elif differ:
                r["batch_dependence_on_cuda"] = differ  # reported; the invariance promise names the CPU variants only
            greedy = inv["greedy"].pop("results")["static_32"]
            agree = agreement(bundle, corpus["source_ids"], corpus["greedy"], greedy, ctx["threads"])
            r["greedy_vs_fp32_reference"] = agree
            if engine.variant == "fp16":
                failures.extend(f"fp16 on {engine.provider}: {f}" for f in agree["failures"])
            elif engine.variant == "fp32" and agree["agreement_pct"] < 100.0:
                off = 100 - agree["agreement_pct"]
                failures.append(f"fp32 greedy differs from the PyTorch reference on {off:.2f}% of inputs")
            for v in inv.values():
                v.pop("results", None)

        def check_residency(r=r, engine=engine):
            r["residency"] = residency(engine, corpus["source_ids"][:8])
            if engine.device != "cpu":
                failures.extend(f"{engine.variant}: {f}" for f in r["residency"]["failures"])

        attempt("invariance", check_invariance)
        attempt("residency", check_residency)
    return {**out, "failures": failures}


def invariance(engine, corpus: dict) -> dict:
    """Greedy, seeded sampling and beam 4 through the service's loop: alone, in static batches of 32, and in
    continuous batches (rows joining as others leave, different source and past lengths in one step).
    For each kind: how many inputs differ from their answer alone, and by how much (beam scores)."""
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    from attnserve.export.checks.corpus import beam_options, sampling_options
    from attnserve.export.checks.parity import TOL_SCORE
    from attnserve.service.engine.engine import DecodingOptions

    ids, n = corpus["source_ids"], engine.max_target_len
    # a v2 variant is bitwise the same in any batch; v1 float32's beam scores may move in the last bits
    tolerance = 0.0 if engine.kv_cache == "in_place" else TOL_SCORE
    kinds = {
        "greedy": [DecodingOptions(max_new_tokens=n)] * len(ids),
        "seeded": [sampling_options(i, n) for i in range(len(ids))],
        "beam4": [beam_options(n)] * len(ids),
    }
    out = {}
    for kind, opts in kinds.items():
        rows = opts[0].n_rows
        runs = {
            "alone": engine.generate(ids, opts, batch_size=rows),
            "static_32": engine.generate(ids, opts, batch_size=32 * rows),
            "continuous_7": engine.generate(ids, opts, batch_size=7 * rows, refill=True, sort=False),
        }
        alone = runs["alone"]
        entry: dict = {"inputs": len(ids), "differ": 0}
        for mode in ("static_32", "continuous_7"):
            n_diff, worst = 0, 0.0
            for a, b in zip(alone, runs[mode]):
                if kind == "beam4":
                    same = [h.token_ids for h in a.hypotheses] == [h.token_ids for h in b.hypotheses]
                    gap = max((abs(x.score - y.score) for x, y in zip(a.hypotheses, b.hypotheses)), default=0.0)
                    worst = max(worst, gap)
                    n_diff += (not same) or gap > tolerance
                elif a.token_ids != b.token_ids:
                    n_diff += 1
                    step = next((k for k, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
                    entry.setdefault(f"{mode}_examples", []).append({"alone": a.token_ids, mode: b.token_ids, "step": step})
            entry[f"{mode}_differ"] = n_diff
            if kind == "beam4":
                entry[f"{mode}_score_max_abs_diff"] = worst
                entry["score_tolerance"] = tolerance
            entry["differ"] += n_diff
        entry["results"] = {"static_32": [r.token_ids for r in runs["static_32"]]}
        out[kind] = entry
    return out


def residency(engine, sources: list[list[int]]) -> dict:
    """Where a running batch keeps each decoder input and output, read off the batch the engine steps: the
    self-attention cache and cross-attention K/V must be device memory (OrtValues on the GPU), so a step moves
    only ids and positions in, and logits / next_token out. On the CPU everything is host memory by design."""
    # imported in the step: an install that cannot import it fails this step, recorded, not the whole report
    from attnserve.service.engine.engine import DecodingOptions

    batch = engine.new_batch()
    engine.join(batch, [(s, DecodingOptions(max_new_tokens=4, min_new_tokens=4)) for s in sources])
    for _ in range(2):
        engine.step(batch)

    def where(v) -> str:
        if isinstance(v, np.ndarray):
            return "host"
        name = v.device_name() if hasattr(v, "device_name") else type(v).__name__
        return "host" if name.lower() == "cpu" else name.lower()

    places: dict[str, str] = {}
    if engine.kv_cache == "in_place":
        places["self_attention_cache"] = sorted({where(v) for v in batch.cache})
        places["cross_attention_kv"] = sorted({where(v) for v in getattr(batch, "cross_device", batch.cross)})
        places["encoder_attention_bias"] = [where(getattr(batch, "bias_device", batch.bias))]
        places["input_ids"] = [where(batch.input_ids)]
        places["positions"] = [where(batch.positions)]
        places["logits"] = [where(batch.logits)]
    else:
        past = getattr(batch, "past", None) or []
        places["self_attention_cache"] = sorted({where(v) for v in past}) or ["unknown"]
        cross = getattr(batch, "cross_values", None) or getattr(batch, "cross_np", None) or []
        places["cross_attention_kv"] = sorted({where(v) for v in cross}) or ["unknown"]
    failures = []
    if engine.device != "cpu":
        for key in ("self_attention_cache", "cross_attention_kv"):
            if places.get(key) != [engine.device]:
                failures.append(f"{key} lives in {places.get(key)}, not on the {engine.device} device: copied every step")
    batch.remove(list({id(q.generation): q.generation for q in batch.rows if q is not None}.values()))
    return {"device": engine.device, "places": places, "failures": failures}
