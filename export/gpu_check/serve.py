"""The serve step: `attnserve-serve` in a subprocess on 127.0.0.1, the bundle's own sample inputs (`GET /samples`:
its parity corpus, so inputs of the model's own task, whatever the task) from concurrent clients against each
input alone (greedy and seeded, then beam 4 over the first few), `/score` of each greedy answer against the
log-probabilities its generation reported, one `/v1/chat/completions` answer against `/generate`'s, and /info's
variant and provider."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SERVE_WORDS = 300  # inputs taken from the bundle's samples (all of them when it offers fewer)


SERVE_CLIENTS = 32


# beam 4 and /score over the first this many words (a beam request takes 4 rows: fewer than greedy's 300 keep the
# step within a short loan of a GPU)
SERVE_BEAM_WORDS = 64


# /score of a greedy answer, teacher-forced in a batch of its own, against the sum of the log-probabilities the
# generation reported for it: on the CPU the same floats up to summation order; fp16 on CUDA within this
SCORE_TOLERANCE = {"cpu": 1e-4, "cuda": 0.05}


# On the CPU every answer must be the same in any company (the service's promise). CUDA's kernels may sum in
# another order at another batch size: a few near-tie flips are reported, more than this share fails the step.
SERVE_MAX_DIFFER_PCT_CUDA = 1.0


INFO_FIELDS = ("model_id", "variant", "provider", "kv_cache", "model_dtype", "threads", "max_batch_size")


class StepTimeout(Exception):
    pass


def served_samples(url: str, n: int) -> list[str]:
    """The first `n` of the server's `GET /samples` (its bundle's parity corpus, read as the service reads it).
    Raises RuntimeError, naming the fix, when the bundle offers none."""
    try:
        samples = http(url + "/samples")["samples"]
    except urllib.error.HTTPError as e:
        raise RuntimeError(
            f"GET /samples answered {e.code}: the bundle has no parity corpus to take inputs from "
            "(rebuild it with attnserve-export build)"
        ) from e
    return samples[:n]


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
    cmd = [sys.executable, "-m", "attnserve.service", str(bundle), "--host", "127.0.0.1", "--port", str(port)]
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
    words = served_samples(url, ctx["serve_words"])

    def ask(i: int, sampled: bool) -> str:
        params: dict = {"lexicon": False}
        if sampled:
            params.update(do_sample=True, seed=1000 + i, temperature=1.0)
        return http(url + "/generate", {"inputs": words[i], "parameters": params})["generated_text"]

    jobs = [(i, s) for i in range(len(words)) for s in (False, True)]
    together, alone, concurrent_s = together_and_alone(lambda j: ask(*j), jobs)
    differ = [
        {"word": words[i], "sampled": s, "concurrent": a, "alone": b} for (i, s), a, b in zip(jobs, together, alone) if a != b
    ]
    share = 100.0 * len(differ) / max(1, len(jobs))
    if differ and (ctx["provider"] == "cpu" or share > SERVE_MAX_DIFFER_PCT_CUDA):
        failures.append(f"{len(differ)} of {len(jobs)} answers differ between 32 concurrent clients and alone")
    beam = beam_check(url, words[:SERVE_BEAM_WORDS], ctx["provider"], failures)
    score = score_check(url, words[:SERVE_BEAM_WORDS], ctx["provider"], failures)
    chat = chat_check(url, words[0], together[0], failures)
    return {
        "url": url,
        "info": {
            k: info.get(k) for k in ("model_id", "variant", "provider", "kv_cache", "model_dtype", "threads", "max_batch_size")
        },
        "words": len(words),
        "inputs_from": "GET /samples",
        "requests_each_way": len(jobs),
        "clients": SERVE_CLIENTS,
        "concurrent_seconds": round(concurrent_s, 2),
        "differ_count": len(differ),
        "differ_pct": round(share, 2),
        "differ": differ[:20],
        "examples": [{"word": words[i], "greedy": together[2 * i]} for i in range(3)],
        "beam4": beam,
        "score": score,
        "chat": chat,
        "failures": failures,
    }


def together_and_alone(fn, items: list) -> tuple[list, list, float]:
    """`fn` over `items` from SERVE_CLIENTS concurrent clients, then one at a time; (together, alone, seconds together)."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(SERVE_CLIENTS) as pool:
        together = list(pool.map(fn, items))
    seconds = time.perf_counter() - t0
    return together, [fn(x) for x in items], seconds


def beam_check(url: str, words: list[str], provider: str, failures: list[str]) -> dict:
    """Beam 4 (`best_of: 4` without sampling) among concurrent clients against each word alone, compared by n-best
    list; on a GPU it also exercises the reorder of the cache on the device."""

    def ask(word: str) -> list:
        body = {"inputs": word, "parameters": {"lexicon": False, "best_of": 4, "details": True}}
        out = http(url + "/generate", body)
        others = (out.get("details") or {}).get("best_of_sequences") or []
        return [out["generated_text"]] + [b["generated_text"] for b in others]

    together, alone, seconds = together_and_alone(ask, words)
    differ = [{"word": w, "concurrent": a, "alone": b} for w, a, b in zip(words, together, alone) if a != b]
    share = 100.0 * len(differ) / max(1, len(words))
    if differ and (provider == "cpu" or share > SERVE_MAX_DIFFER_PCT_CUDA):
        failures.append(f"beam 4: {len(differ)} of {len(words)} n-best lists differ between concurrent clients and alone")
    if any(len(a) < 2 for a in together):
        failures.append("beam 4: an answer came without its other hypotheses (details.best_of_sequences)")
    return {"words": len(words), "concurrent_seconds": round(seconds, 2), "differ_count": len(differ), "differ": differ[:10]}


def score_check(url: str, words: list[str], provider: str, failures: list[str]) -> dict:
    """Each word's greedy answer scored by `/score` (concurrent clients, so targets share the scoring batch) against
    the sum of the log-probabilities that its generation reported, end token included. `/score` reads a text as
    the tokenizer splits it; a subword model may have generated the same text in other tokens ("7", "8" for
    "78"), whose log-probabilities are another sequence's: those answers are counted, not compared."""

    def generate(word: str) -> tuple[str, float, list[int]]:
        out = http(url + "/generate", {"inputs": word, "parameters": {"lexicon": False, "details": True}})
        tokens = out["details"]["tokens"]
        return out["generated_text"], sum(t["logprob"] for t in tokens), [t["id"] for t in tokens]

    def score(item: tuple[str, str]) -> tuple[float, list[int]]:
        word, answer = item
        scored = http(url + "/score", {"inputs": word, "targets": [answer]})["scores"][0]
        return scored["total"], [t["id"] for t in scored.get("tokens") or []]

    answers = [generate(w) for w in words]
    together, alone, seconds = together_and_alone(score, [(w, a) for w, (a, _, _) in zip(words, answers)])
    same_tokens = [ids == scored_ids for (_, _, ids), (_, scored_ids) in zip(answers, together)]
    gaps = [abs(t - lp) for (t, _), (_, lp, _), same in zip(together, answers, same_tokens) if same]
    apart = [abs(a - b) for (a, _), (b, _) in zip(together, alone)]
    if words and not gaps:
        failures.append("/score: no greedy answer was generated in the tokens its text reads as, so none could be compared")
    tolerance = SCORE_TOLERANCE[provider]
    worst = max(gaps, default=0.0)
    if worst > tolerance:
        failures.append(
            f"/score: a greedy answer's total differs from its generation's log-probabilities by {worst:.3g} "
            f"(tolerance {tolerance})"
        )
    if max(apart, default=0.0) > tolerance:
        failures.append(f"/score: concurrent and lone scores differ by up to {max(apart):.3g} (tolerance {tolerance})")
    return {
        "words": len(words),
        "concurrent_seconds": round(seconds, 2),
        "tolerance": tolerance,
        "max_gap_vs_generation": worst,
        "compared": len(gaps),
        "generated_in_other_tokens": same_tokens.count(False),
        "other_tokens_examples": [
            {"input": w, "answer": a, "generated_ids": ids, "scored_ids": scored_ids}
            for w, (a, _, ids), (_, scored_ids), same in zip(words, answers, together, same_tokens)
            if not same
        ][:5],
        "max_gap_concurrent_vs_alone": max(apart, default=0.0),
    }


def chat_check(url: str, word: str, greedy: str, failures: list[str]) -> dict:
    """One `/v1/chat/completions` answer (the OpenAI route) against `/generate`'s greedy answer for the same word."""
    info = http(url + "/info")
    body = {"model": info.get("model_id"), "messages": [{"role": "user", "content": word}], "lexicon": False}
    answer = http(url + "/v1/chat/completions", body)["choices"][0]["message"]["content"]
    if answer != greedy:
        failures.append(f"/v1/chat/completions answered {answer!r} for {word!r}, /generate {greedy!r}")
    return {"word": word, "answer": answer, "same_as_generate": answer == greedy}
