"""The serve step: `attnserve-serve` in a subprocess on 127.0.0.1, made-up words from concurrent clients against
each word alone (greedy and seeded), and /info's variant and provider."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

SERVE_WORDS = 300


SERVE_CLIENTS = 32


# On the CPU every answer must be the same in any company (the service's promise). CUDA's kernels may sum in
# another order at another batch size: a few near-tie flips are reported, more than this share fails the step.
SERVE_MAX_DIFFER_PCT_CUDA = 1.0


INFO_FIELDS = ("model_id", "variant", "provider", "kv_cache", "model_dtype", "threads", "max_batch_size")


class StepTimeout(Exception):
    pass


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
