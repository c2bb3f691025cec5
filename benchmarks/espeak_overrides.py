"""Two figures of docs/PRONUNCIATIONS.md and docs/API.md's `details: "words"`:

1. espeak-ng's own en-us IPA (piper-phonemize) for `--words` random CMUdict words, read as `espeak` overrides
   (service/text/phone_input.py): how many symbols it cannot read, and how often the phones equal a CMUdict entry
   of the word, with stress and without;
2. the JSON of one /generate answer for a 2,000-word text with `details: true` and with `details: "words"`.

    .venv/bin/python -m benchmarks.espeak_overrides --out benchmarks/results/espeak_overrides.json
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from attnserve.service.text.phone_input import PhoneInputError, read_ipa
from attnserve.training.data import cmudict_path, parse_cmudict
from benchmarks.measure import machine

ROOT = Path(__file__).resolve().parents[1]
PARAGRAPH = (
    "On 3 May 2024 the zyxoplat committee met in New York, and Dr. Smith paid $3.50 for 12 blorfing widgets. "
    "I read the paper yesterday; they record a new record at 10:30 am, with 2,500 people from the US watching. "
)


def read_back(n: int, seed: int) -> dict:
    import piper_phonemize

    lexicon = parse_cmudict(cmudict_path())
    words = random.Random(seed).sample(sorted(w for w in lexicon if w.isalpha()), n)
    unreadable, exact, stressless = {}, 0, 0

    def bare(phones: str) -> str:
        return " ".join(p.rstrip("012") for p in phones.split())

    for w in words:
        written = "".join(piper_phonemize.phonemize_espeak(w, "en-us")[0])
        try:
            phones = " ".join(read_ipa(written, "espeak"))
        except PhoneInputError as e:
            unreadable[e.symbol] = unreadable.get(e.symbol, 0) + 1
            continue
        exact += phones in lexicon[w]
        stressless += bare(phones) in {bare(p) for p in lexicon[w]}
    return {
        "words": n,
        "seed": seed,
        "unreadable": unreadable,
        "equal_to_cmudict": round(exact / n, 4),
        "equal_to_cmudict_stress_ignored": round(stressless / n, 4),
    }


def answer_sizes(words: int) -> dict:
    from fastapi.testclient import TestClient

    from attnserve.service.http.app import create_app
    from attnserve.service.settings import Settings

    text = PARAGRAPH * (words // 50)  # 50 words as read a paragraph (numbers spelt out)
    with TestClient(create_app(Settings(bundle=ROOT / "models" / "g2p-en"))) as client:
        sizes = {}
        for details in (True, "words"):
            r = client.post("/generate", json={"inputs": text, "parameters": {"details": details}})
            r.raise_for_status()
            sizes[str(details).lower()] = len(r.content)
        n = len(r.json()["details"]["words"])
    return {"words_read": n, "bytes": sizes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--words", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    report = {"machine": machine(), "read_back": read_back(args.words, args.seed), "answer_json": answer_sizes(2000)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
