"""`attnserve-gpu-check [--out DIR] [--bundle B] [--provider cuda|cpu]`: the CUDA path proven in one command.

Five steps, each in its own time bound, each failure recorded and the next step run anyway:
- machine: GPU, driver, the CUDA and cuDNN libraries ONNX Runtime loaded, its version and providers;
- variant: `add-variant fp16` on a COPY of the bundle (export/add_variant.py);
- verify: on the device, greedy, seeded sampling and beam 4 alone, in static and in continuous batches;
  fp16 greedy against the fp32 reference (agreement, near-ties); where the cache and cross K/V live;
- bench: fp16 v2 against fp32 v1 (and PyTorch's cached decoder when torch is importable), at batch
  1/32/128 x 8/32/128 tokens (capped at the model's max_target_len), export/bench.py's cells;
- serve: `attnserve-serve` in a subprocess on 127.0.0.1, 300 made-up words from 32 concurrent clients
  against each word alone (greedy and seeded), and /info's variant and provider.
`--provider cpu` is its dry run on the int8 and fp32 variants (int8 falls back to v1 where the runtime
lacks the v2 kernels, and says so). Writes DIR/report.json and DIR/report.md; exits 1 when a step failed.

Needs no torch, no training extra and no network: ONNX Runtime, onnx, and the service's own dependencies.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path

import numpy as np

STEPS = ("machine", "variant", "verify", "bench", "serve")
# seconds each step may take: on a GPU host (device time is short) and on a CPU (CI's shared 2-core machines)
STEP_LIMIT_S = {
    "cuda": {"machine": 45, "variant": 100, "verify": 90, "bench": 90, "serve": 90},
    "cpu": {"machine": 60, "variant": 240, "verify": 240, "bench": 240, "serve": 180},
}
BATCHES = (1, 32, 128)
LENGTHS = (8, 32, 128)
SERVE_WORDS = 300
SERVE_CLIENTS = 32
# On the CPU every answer must be the same in any company (the service's promise). CUDA's kernels may sum in
# another order at another batch size: a few near-tie flips are reported, more than this share fails the step.
SERVE_MAX_DIFFER_PCT_CUDA = 1.0
INFO_FIELDS = ("model_id", "variant", "provider", "kv_cache", "model_dtype", "threads", "max_batch_size")


class StepTimeout(Exception):
    pass


def run_step(fn, ctx: dict, limit_s: float) -> dict:
    """`fn(ctx)` in a daemon thread, at most `limit_s` seconds: {"ok", "seconds", "result" | "error"}. A step that
    overruns is recorded as failed and left behind (the process exits when the report is written)."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn(ctx)
        except BaseException as e:  # every failure is recorded, none stops the next step
            box["error"] = f"{type(e).__name__}: {e}".strip()
            box["traceback"] = traceback.format_exc()[-4000:]

    t0 = time.perf_counter()
    thread = threading.Thread(target=target, name=f"gpu-check-{fn.__name__}", daemon=True)
    thread.start()
    thread.join(limit_s)
    out: dict = {"seconds": round(time.perf_counter() - t0, 1), "limit_s": limit_s}
    if thread.is_alive():
        out.update(ok=False, error=f"did not finish within {limit_s} s")
        if ctx.get("partial", {}).get(fn.__name__.removeprefix("step_")):
            out["partial"] = ctx["partial"][fn.__name__.removeprefix("step_")]
    elif "error" in box:
        out.update(ok=False, error=box["error"], traceback=box["traceback"])
    else:
        result = box.get("result") or {}
        failures = result.pop("failures", [])
        out.update(ok=not failures, result=result)
        if failures:
            out["failures"] = failures
    return out


# ---- machine -------------------------------------------------------------------------------
def step_machine(ctx: dict) -> dict:
    import onnxruntime as ort

    from service.engine.runtime import cpu_model, gpu_present, nvidia_library_dirs, preload_cuda

    info: dict = {
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "onnxruntime_file": ort.__file__,
        "available_providers": ort.get_available_providers(),
        "device": ort.get_device(),
        "build_info": getattr(ort, "get_build_info", lambda: None)(),
        "nvidia_wheels": nvidia_wheels(),
        "nvidia_library_dirs": nvidia_library_dirs(),
        "gpu_present": gpu_present(),
    }
    with contextlib.suppress(Exception):
        from onnxruntime.capi import onnxruntime_validation

        info["cuda_version_built_with"] = onnxruntime_validation.get_package_name_and_version_info()[2]
    info["nvidia_smi"] = nvidia_smi()
    failures = []
    if ctx["provider"] == "cuda":
        info["preload_dlls"] = preload_cuda()
        if "CUDAExecutionProvider" not in info["available_providers"]:
            failures.append(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (the GPU wheel is onnxruntime-gpu)")
        if not info["gpu_present"]:
            failures.append("no NVIDIA device found (/dev/nvidiactl, /proc/driver/nvidia/gpus)")
        out = io.StringIO()
        with contextlib.suppress(Exception), contextlib.redirect_stdout(out):
            ort.print_debug_info()
        info["onnxruntime_debug_info"] = out.getvalue().splitlines()
    info["loaded_libraries"] = loaded_libraries()
    return {**info, "failures": failures}


def nvidia_wheels() -> dict[str, str]:
    from importlib.metadata import distributions

    names = {}
    for dist in distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith(("nvidia-", "onnxruntime", "torch")):
            names[name] = dist.version
    return dict(sorted(names.items()))


def nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"present": False}
    try:
        q = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        head = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout.splitlines()[:4]
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"present": True, "error": str(e)}
    gpus = [
        dict(zip(("name", "driver", "memory", "compute_capability"), (x.strip() for x in ln.split(","))))
        for ln in q.stdout.splitlines()
    ]
    cuda = next((ln.split("CUDA Version:")[1].strip(" |") for ln in head if "CUDA Version:" in ln), None)
    return {"present": True, "gpus": gpus, "driver_cuda_version": cuda}


def loaded_libraries() -> list[str]:
    """The CUDA, cuBLAS, cuDNN and ONNX Runtime libraries this process has loaded (their file names carry versions)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    keys = ("libcudart", "libcublas", "libcudnn", "libcufft", "libcurand", "libnvrtc", "onnxruntime_providers", "libcuda.so")
    paths = {ln.split()[-1] for ln in maps.splitlines() if ln.count("/") and any(k in ln for k in keys)}
    return sorted(paths)


# ---- variant -------------------------------------------------------------------------------
def step_variant(ctx: dict) -> dict:
    from export.pipeline.add_variant import FILES, add_variant

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


# ---- verify --------------------------------------------------------------------------------
def open_engine(bundle, variant: str, provider: str, threads: int | None):
    """The engine of `variant`; one that cannot run here falls back to its v1 variant (reported, not a failure)."""
    from service.engine.bundle import BundleError
    from service.engine.engine import Engine

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
    from export.checks.fp16 import agreement
    from service.engine.bundle import load_bundle

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
    from export.checks.corpus import beam_options, sampling_options
    from export.checks.parity import TOL_SCORE
    from service.engine.engine import DecodingOptions

    ids, n = corpus["source_ids"], engine.max_target_len
    # a v2 variant is bitwise the same in any batch; v1 float32's beam scores may move in the last bits
    tolerance = 0.0 if engine.in_place else TOL_SCORE
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
    from service.engine.engine import DecodingOptions

    batch = engine.new_batch()
    batch.add(engine.start([(s, DecodingOptions(max_new_tokens=4, min_new_tokens=4)) for s in sources]))
    for _ in range(2):
        engine.step(batch)

    def where(v) -> str:
        if isinstance(v, np.ndarray):
            return "host"
        name = v.device_name() if hasattr(v, "device_name") else type(v).__name__
        return "host" if name.lower() == "cpu" else name.lower()

    places: dict[str, str] = {}
    if engine.in_place:
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


# ---- bench ---------------------------------------------------------------------------------
def step_bench(ctx: dict) -> dict:
    from export.bench import time_cell
    from service.engine.bundle import load_bundle
    from service.engine.engine import DecodingOptions

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
            from training.decode import generate_ids

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
        import torch
    except ImportError:
        return None, "torch not importable: PyTorch column skipped"
    try:  # PyTorch's decode loop lives with training, whose metrics need the train extra (rapidfuzz and the rest)
        from training.config import ModelConfig
        from training.decode import generate_ids  # noqa: F401  (imported here so a missing module skips the column)
        from training.model import Transformer
        from training.weights import load_bundle_weights
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
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---- serve ---------------------------------------------------------------------------------
def made_up_words(n: int, seed: int = 0) -> list[str]:
    """Pronounceable letter strings no dictionary holds (consonant-vowel patterns), distinct."""
    rng = np.random.default_rng(seed)
    cons, vows = list("bcdfghjklmnprstvwz"), list("aeiouy")
    words: dict[str, None] = {}
    while len(words) < n:
        k = int(rng.integers(3, 6))
        w = "".join(str(rng.choice(cons)) + str(rng.choice(vows)) for _ in range(k)) + str(rng.choice(cons))
        words[w] = None
    return list(words)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: dict | None = None, timeout: float = 60.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def step_serve(ctx: dict) -> dict:
    bundle = ctx.get("bundle_copy") or ctx["bundle"]
    port = free_port()
    variant = "fp16" if ctx["provider"] == "cuda" else "auto"
    cmd = [sys.executable, "-m", "service", str(bundle), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--provider", ctx["provider"], "--variant", variant, "--max-batch-size", "64"]
    log_path = ctx["out"] / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=os.environ.copy())
        try:
            return serve_checks(ctx, proc, url, variant, log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def serve_checks(ctx: dict, proc, url: str, variant: str, log_path: Path) -> dict:
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text()[-1500:]
            raise RuntimeError(f"attnserve-serve exited with status {proc.returncode}: {tail}")
        with contextlib.suppress(OSError, ValueError):
            http(url + "/ready", timeout=2)
            break
        if time.monotonic() > deadline:
            raise StepTimeout(f"attnserve-serve not ready within 90 s: {log_path.read_text()[-1500:]}")
        time.sleep(0.5)
    info = http(url + "/info")
    failures = []
    want_provider = "CUDAExecutionProvider" if ctx["provider"] == "cuda" else "CPUExecutionProvider"
    if info.get("provider") != want_provider:
        failures.append(f"/info provider is {info.get('provider')!r}, not {want_provider}")
    if variant != "auto" and info.get("variant") != variant:
        failures.append(f"/info variant is {info.get('variant')!r}, not {variant!r}")
    words = made_up_words(ctx["serve_words"])

    def ask(i: int, sampled: bool) -> str:
        params: dict = {"lexicon": False}
        if sampled:
            params.update(do_sample=True, seed=1000 + i, temperature=1.0)
        return http(url + "/generate", {"inputs": words[i], "parameters": params})["generated_text"]

    jobs = [(i, s) for i in range(len(words)) for s in (False, True)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(SERVE_CLIENTS) as pool:
        together = list(pool.map(lambda j: ask(*j), jobs))
    concurrent_s = time.perf_counter() - t0
    alone = [ask(*j) for j in jobs]
    differ = [
        {"word": words[i], "sampled": s, "concurrent": a, "alone": b} for (i, s), a, b in zip(jobs, together, alone) if a != b
    ]
    share = 100.0 * len(differ) / max(1, len(jobs))
    if differ and (ctx["provider"] == "cpu" or share > SERVE_MAX_DIFFER_PCT_CUDA):
        failures.append(f"{len(differ)} of {len(jobs)} answers differ between 32 concurrent clients and alone")
    return {
        "url": url,
        "info": {
            k: info.get(k) for k in ("model_id", "variant", "provider", "kv_cache", "model_dtype", "threads", "max_batch_size")
        },
        "words": len(words),
        "requests_each_way": len(jobs),
        "clients": SERVE_CLIENTS,
        "concurrent_seconds": round(concurrent_s, 2),
        "differ_count": len(differ),
        "differ_pct": round(share, 2),
        "differ": differ[:20],
        "examples": [{"word": words[i], "greedy": together[2 * i]} for i in range(3)],
        "failures": failures,
    }


# ---- report --------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    steps = report["steps"]
    lines = [
        f"# attnserve-gpu-check: {'PASSED' if report['passed'] else 'FAILED'}",
        "",
        f"`{report['command']}`, {report['started']}, {report['seconds']} s, provider {report['provider']}, "
        f"bundle {report['bundle']}",
        "",
        "| step | ok | seconds | failures |",
        "|---|---|---|---|",
    ]
    for name, s in steps.items():
        why = "; ".join(s.get("failures", [])) or s.get("error", "")
        lines.append(f"| {name} | {'yes' if s['ok'] else 'NO'} | {s['seconds']} | {why[:300]} |")
    m = steps.get("machine", {}).get("result", {})
    if m:
        smi = m.get("nvidia_smi", {})
        gpus = ", ".join(f"{g.get('name')} (driver {g.get('driver')})" for g in smi.get("gpus", [])) or "none"
        lines += [
            "",
            "## Machine",
            f"- GPU: {gpus}; driver's CUDA {smi.get('driver_cuda_version')}",
            f"- ONNX Runtime {m.get('onnxruntime')} ({m.get('device')}), providers {m.get('available_providers')}, "
            f"built with CUDA {m.get('cuda_version_built_with')}",
            f"- CPU: {m.get('cpu')}",
            f"- nvidia wheels: {m.get('nvidia_wheels')}",
            f"- libraries loaded: {[Path(p).name for p in m.get('loaded_libraries', [])]}",
        ]
    v = steps.get("variant", {}).get("result", {})
    if v:
        lines += [
            "",
            "## Variant",
            f"- fp16 added to a copy ({v['bundle_copy']}): {v['fp16_bytes'] / 1e6:.1f} MB {v['fp16_files']}",
        ]
    r = steps.get("verify", {}).get("result", {})
    if r:
        lines += ["", "## Verify"]
        for name in ("fp16", "int8", "fp32"):
            if name not in r:
                continue
            x = r[name]
            inv = {k: {m: e[m] for m in e if m.endswith(("differ", "diff"))} for k, e in x.get("invariance", {}).items()}
            lines.append(f"- **{name}** served as {x['variant']} on {x['provider']} ({x['kv_cache']} cache)")
            if "fallback" in x:
                lines.append(f"  - fell back: {x['fallback']}")
            lines.append(f"  - alone vs batched: {inv or x.get('invariance_error')}")
            agree = x.get("greedy_vs_fp32_reference")
            if agree:
                lines.append(
                    f"  - greedy vs the fp32 reference: {agree['agreement_pct']}% of {agree['inputs']}; "
                    f"largest fp32 log-probability gap of a difference {agree['max_logprob_gap_fp32']}"
                )
            lines.append(f"  - residency: {x.get('residency', {}).get('places') or x.get('residency_error')}")
    b = steps.get("bench", {}).get("result", {})
    if b:
        backends = list(dict.fromkeys(c["backend"] for c in b["results"]))
        lines += ["", f"## Bench ({b['provider']}; {b['torch']}) {b.get('note', '')}", ""]
        lines.append("| batch | tokens | " + " | ".join(f"{k} ms/step (tok/s)" for k in backends) + " |")
        lines.append("|---|---|" + "---|" * len(backends))
        for n in b["lengths"]:
            for bs in b["batches"]:
                cells = {c["backend"]: c for c in b["results"] if c["batch"] == bs and c["output_len"] == n}
                vals = [
                    f"{cells[k]['ms_per_step']:.3f} ({cells[k]['tokens_per_s']:.0f})" if k in cells else "-" for k in backends
                ]
                lines.append(f"| {bs} | {n} | " + " | ".join(vals) + " |")
    s = steps.get("serve", {}).get("result", {})
    if s:
        lines += [
            "",
            "## Serve",
            f"- /info: {s['info']}",
            f"- {s['words']} made-up words, greedy and seeded, {s['clients']} concurrent clients ({s['concurrent_seconds']} s) "
            f"against each alone: {s['differ_count']} of {2 * s['words']} answers differ",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="attnserve-gpu-check", description="Prove the CUDA path end to end (report.json, report.md)."
    )
    p.add_argument("--out", type=Path, default=Path("gpu-check"), help="report folder (default ./gpu-check)")
    p.add_argument("--bundle", type=Path, default=Path("models/g2p-en"), help="the bundle (copied; never changed)")
    p.add_argument("--provider", choices=["cuda", "cpu"], default="cuda", help="cpu: the dry run on the int8 and fp32 variants")
    p.add_argument("--steps", default=",".join(STEPS), help=f"subset of {','.join(STEPS)}")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)), help="bench batch sizes")
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="bench output lengths (capped at max_target_len)")
    p.add_argument("--repeats", type=int, help="bench runs per cell (default 3 on cuda, 1 on cpu)")
    p.add_argument("--serve-words", type=int, default=SERVE_WORDS, help="made-up words for the serve step")
    p.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: the CPUs this process may use)")
    p.add_argument(
        "--keep-bundle",
        type=Path,
        help="write the bundle copy with the fp16 variant here and keep it (default: a temporary folder, removed)",
    )
    args = p.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        print(f"error: unknown step(s) {unknown}; choose from {', '.join(STEPS)}", file=sys.stderr)
        return 2
    if not (args.bundle / "bundle.json").is_file():
        print(f"error: {args.bundle} is not a model bundle (no bundle.json)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = {
        "out": args.out.resolve(),
        # the bundle copy stays out of --out, which holds only the reports and the server's log
        "work": args.keep_bundle.resolve() if args.keep_bundle else Path(tempfile.mkdtemp(prefix="attnserve-gpu-check-")),
        "bundle": args.bundle.resolve(),
        "provider": args.provider,
        "threads": args.threads,
        "batches": [int(x) for x in args.batches.split(",")],
        "lengths": [int(x) for x in args.lengths.split(",")],
        "repeats": args.repeats or (3 if args.provider == "cuda" else 1),
        "serve_words": args.serve_words,
    }
    t0 = time.perf_counter()
    report = {
        "command": "attnserve-gpu-check " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provider": args.provider,
        "bundle": str(args.bundle),
        "steps": {},
    }
    fns = {"machine": step_machine, "variant": step_variant, "verify": step_verify, "bench": step_bench, "serve": step_serve}
    for name in steps:
        _log(f"[gpu-check] {name} ...")
        report["steps"][name] = run_step(fns[name], ctx, STEP_LIMIT_S[args.provider][name])
        s = report["steps"][name]
        why = s.get("error") or s.get("failures") or ""
        _log(f"[gpu-check] {name}: {'ok' if s['ok'] else 'FAILED'} in {s['seconds']} s {why}")
    if "machine" in report["steps"] and report["steps"]["machine"].get("result"):
        report["steps"]["machine"]["result"]["loaded_libraries"] = loaded_libraries()  # after the CUDA sessions
    report["failures"] = [
        f"{n}: {f}" for n, s in report["steps"].items() for f in (s.get("failures") or [s.get("error")] if not s["ok"] else [])
    ]
    report["passed"] = not report["failures"]
    report["seconds"] = round(time.perf_counter() - t0, 1)
    (args.out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.out / "report.md").write_text(markdown(report))
    if not args.keep_bundle:
        shutil.rmtree(ctx["work"], ignore_errors=True)
    _log(f"[gpu-check] {'passed' if report['passed'] else 'FAILED'} in {report['seconds']} s: {args.out / 'report.md'}")
    return 0 if report["passed"] else 1


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a step left running past its bound must not hold the process
