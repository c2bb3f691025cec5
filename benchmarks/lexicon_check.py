"""Check a lexicon against the model: the entries the model finds least likely.

Each entry (word, pronunciation) of the bundle's lexicon (for the default model, all of CMUdict; or any
`word<TAB>ARPAbet` file given with --lexicon, .tsv or .tsv.gz) is scored by the served model with teacher
forcing (`Generator.score` in process, or `POST /score` of a running server with --url): the log-probability
of the pronunciation given the word, the end token included. The least likely entries come first: by the
mean log-probability of their tokens (`--by score`, the default: long entries are not penalised for their
length) or by the total (`--by total`). What comes out is where a dictionary and the model disagree most:
an entry wrong in the dictionary, a foreign name, an abbreviation read letter by letter, or a word the
model has not learnt.

    python -m benchmarks.lexicon_check --limit 5000                 # a fixed sample of 5,000 words, in process
    python -m benchmarks.lexicon_check --limit 0 --top 50           # every entry (minutes)
    python -m benchmarks.lexicon_check --url http://127.0.0.1:8000  # a running server's served variant

Words the model cannot read as one word (a word of the reader's running text: "a.m.", digits) are skipped and
counted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_lexicon(path: Path) -> dict[str, list[str]]:
    """word -> its pronunciations, in file order, from a `word<TAB>pronunciation` TSV (gzip'd when it ends in .gz)."""
    opener = gzip.open if path.suffix == ".gz" else open
    entries: dict[str, list[str]] = {}
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            word, tab, target = line.rstrip("\n").partition("\t")
            if tab and word.strip() and target.strip():
                entries.setdefault(word.strip(), []).append(target.strip())
    return entries


def bundle_lexicon(bundle: Path) -> Path:
    meta = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    if not meta.get("lexicon"):
        raise SystemExit(f"{bundle} has no lexicon: give one with --lexicon FILE.tsv")
    return bundle / meta["lexicon"]["file"]


def score_in_process(bundle: Path, words: list[tuple[str, list[str]]], threads: int | None) -> list[list | str]:
    """Per word: [(target, total, score)], or the reason it was skipped."""
    from attnserve.service.client import Generator
    from attnserve.service.engine.engine import InputError

    out: list[list | str] = []
    with Generator(bundle, threads=threads) as gen:
        for result, (_, targets) in zip(gen.score_many(words), words):
            if isinstance(result, InputError):
                out.append(str(result))
            else:
                out.append([(t, r.total, r.score) for t, r in zip(targets, result)])
    return out


def score_over_http(url: str, words: list[tuple[str, list[str]]], clients: int) -> list[list | str]:
    import httpx

    with httpx.Client(base_url=url, timeout=60) as http:

        def one(item: tuple[str, list[str]]) -> list | str:
            word, targets = item
            r = http.post("/score", json={"inputs": word, "targets": targets})
            if r.status_code == 422:
                return r.json()["error"]
            r.raise_for_status()
            return [(t, s["total"], s["score"]) for t, s in zip(targets, r.json()["scores"])]

        with ThreadPoolExecutor(clients) as pool:
            return list(pool.map(one, words))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "g2p-en", help="the model bundle (default: models/g2p-en)")
    p.add_argument("--lexicon", type=Path, help="word<TAB>pronunciation TSV (.tsv or .tsv.gz); default: the bundle's")
    p.add_argument("--url", help="score with POST /score of this running server instead of in process")
    p.add_argument("--limit", type=int, default=5000, help="score a fixed random sample of this many words (0: all)")
    p.add_argument("--seed", type=int, default=0, help="the sample's seed")
    p.add_argument("--top", type=int, default=20, help="how many entries to list")
    p.add_argument("--by", choices=("score", "total"), default="score", help="rank by the mean or the total log-probability")
    p.add_argument("--threads", type=int, help="ONNX Runtime threads (in process)")
    p.add_argument("--clients", type=int, default=8, help="concurrent requests (--url)")
    p.add_argument("--json", type=Path, help="also write every scored entry here")
    args = p.parse_args(argv)

    entries = read_lexicon(args.lexicon or bundle_lexicon(args.bundle))
    words = sorted(entries.items())
    if args.limit and args.limit < len(words):
        words = sorted(random.Random(args.seed).sample(words, args.limit))
    t0 = time.perf_counter()
    if args.url:
        results = score_over_http(args.url, words, args.clients)
    else:
        results = score_in_process(args.bundle, words, args.threads)
    seconds = time.perf_counter() - t0
    scored = [(w, t, total, score) for (w, _), r in zip(words, results) if not isinstance(r, str) for t, total, score in r]
    skipped = [(w, r) for (w, _), r in zip(words, results) if isinstance(r, str)]
    key = 3 if args.by == "score" else 2
    scored.sort(key=lambda e: e[key])
    print(f"{len(scored)} entries of {len(words) - len(skipped)} words scored in {seconds:.1f} s; {len(skipped)} words skipped")
    for w, reason in skipped[:3]:
        print(f"  skipped {w!r}: {reason}")
    print(f"\nthe {min(args.top, len(scored))} least likely by {args.by} (mean = total / tokens, end token included):")
    print(f"{'word':<20} {'pronunciation':<36} {'total':>9} {'mean':>8}")
    for w, t, total, score in scored[: args.top]:
        print(f"{w:<20} {t:<36} {total:9.3f} {score:8.3f}")
    if args.json:
        rows = [{"word": w, "target": t, "total": total, "score": score} for w, t, total, score in scored]
        args.json.write_text(json.dumps({"entries": rows, "skipped": dict(skipped)}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
