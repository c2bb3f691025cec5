"""How far `alphabet: "espeak"` is from espeak-ng itself, on common words and on running sentences.

    python -m benchmarks.espeak_distance [--bundle models/g2p-en] [--corpus /usr/share/vim/vim90/doc] [--glob '*.txt'] \\
        [--words 3000] [--sentences 300] [--out benchmarks/results/espeak_distance.json]
    python -m benchmarks.espeak_distance --write-function-words service/text/espeak_function_words.tsv

espeak-ng is `piper-phonemize` (the dev extra): `phonemize_espeak(text, "en-us")`, what Piper's voices are fed.
attnserve answers through the in-process `Generator` (the server's request layer, lexicon first), one line per
word, then one line per sentence with `punctuation: true`.

- Words: the most frequent words of a corpus of English text files (default: Vim's help files, which a Debian
  machine with vim has), those the bundle's lexicon knows, each sent alone, against espeak-ng given the word alone.
- Sentences: the corpus's sentences of 6 to 20 plain words (letters, commas, a final full stop).
- Figures: the character error rate (Levenshtein distance over espeak-ng's length, summed over the items) and the
  share of identical items, with stress and length marks kept and with every mark removed from both; and for every
  answer, whether each of its characters is a key of Piper's phoneme map.

`--write-function-words` writes the table of function words (service/text/espeak.py `function_words`): each word of
FUNCTION_WORDS as espeak-ng says it alone, at the end of a phrase, before a consonant and before a vowel.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import re
import sys
import time
from pathlib import Path

from attnserve.service.client import Generator
from attnserve.service.text.lexicon import Lexicon

ROOT = Path(__file__).resolve().parents[1]


# closed-class words whose espeak-ng form depends on where they stand
FUNCTION_WORDS = """
a an the to of and or but nor for at as in on by with from into onto upon up out off over under about than then
that this these those there their they them he him his she her hers it its we us our you your i me my who whom whose
which what when where how why is am are was were be been being have has had do does did will would shall should can
could may might must not no so if some any all each such just too very both either neither one yet while since until
till through though although because per via without within between among across after before against along around
behind below beside beyond down during except inside near outside past toward towards whether let here
it's that's don't i'm you're we're they're can't won't isn't doesn't didn't i'll you'll i've let's there's
""".split()
MARKS = "\u02c8\u02cc\u02d0"  # ˈ ˌ ː


def espeak(text: str) -> str:
    """espeak-ng's en-us IPA of `text`, its sentences joined by a space, as Piper's phonemizer gives them."""
    from piper_phonemize import phonemize_espeak

    return " ".join("".join(s) for s in phonemize_espeak(text, "en-us"))


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def corpus_text(corpus: Path, pattern: str = "*.txt") -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(corpus.glob(pattern)))


def common_words(text: str, lexicon: Lexicon, n: int) -> list[str]:
    counts = collections.Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    known = (w for w, _ in counts.most_common() if (len(w) > 1 or w in ("a", "i")) and lexicon.lookup(w))
    return [w for _, w in zip(range(n), known)]


def plain_sentences(text: str, n: int) -> list[str]:
    found = re.findall(r"(?<![\w.])([A-Z][a-z]+(?:,? [a-z]+){5,19}\.)(?=\s)", text)
    return list(dict.fromkeys(" ".join(s.split()) for s in found))[:n]


def distance(pairs: list[tuple[str, str]], strip: bool = False) -> dict[str, float]:
    """Character error rate and the share of identical items over (ours, espeak-ng's) pairs."""
    table = str.maketrans("", "", MARKS)
    if strip:
        pairs = [(a.translate(table), b.translate(table)) for a, b in pairs]
    errors = sum(levenshtein(a, b) for a, b in pairs)
    return {
        "cer": round(errors / max(1, sum(len(b) for _, b in pairs)), 5),
        "identical": round(sum(a == b for a, b in pairs) / max(1, len(pairs)), 5),
    }


def compare(items: list[str], answers: list[str], keys: set[str]) -> dict:
    references = [espeak(t) for t in items]
    pairs = list(zip(answers, references))
    outside = sorted({c for a in answers for c in a if c not in keys})
    return {
        "n": len(items),
        "marks_kept": distance(pairs),
        "marks_removed": distance(pairs, strip=True),
        "characters_outside_piper_map": outside,
        "items": [{"text": t, "attnserve": a, "espeak_ng": r} for t, a, r in zip(items, answers, references)],
    }


def write_function_words(path: Path) -> None:
    rows = []
    for w in FUNCTION_WORDS:
        said = re.sub(r"^i\b", "I", w)  # espeak-ng reads a lower-case "i" as the letter
        alone = espeak(said)
        final = espeak("we saw " + said).split()
        consonant = espeak("we saw " + said + " dog").split()
        vowel = espeak("we saw " + said + " old dog").split()
        if len(final) != 3 or len(consonant) != 4 or len(vowel) != 5:
            print(f"skipped {w!r}: espeak-ng joined it to a neighbour ({final}, {consonant}, {vowel})", file=sys.stderr)
            continue
        rows.append("\t".join((w, alone, final[2], consonant[2], vowel[2])))
    head = [
        "# Function words as espeak-ng (en-us) says them: alone, at a phrase's end, before a consonant, before a vowel.",
        "# Written by benchmarks/espeak_distance.py --write-function-words; read by service/text/espeak.py.",
        "word\talone\tfinal\tconsonant\tvowel",
    ]
    path.write_text("\n".join(head + rows) + "\n", encoding="utf-8")
    print(f"{path}: {len(rows)} words")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "g2p-en")
    p.add_argument("--corpus", type=Path, default=Path("/usr/share/vim/vim90/doc"))
    p.add_argument("--glob", default="*.txt", help="the corpus's files")
    p.add_argument("--words", type=int, default=3000)
    p.add_argument("--sentences", type=int, default=300)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "espeak_distance.json")
    p.add_argument("--write-function-words", type=Path, metavar="TSV")
    args = p.parse_args(argv)
    if args.write_function_words:
        write_function_words(args.write_function_words)
        return 0
    from piper_phonemize import get_espeak_map

    keys = set(get_espeak_map())
    text = corpus_text(args.corpus, args.glob)
    with Generator(args.bundle, threads=1) as g:
        lexicon = g.requests.lexicon
        words = common_words(text, lexicon, args.words)
        sentences = plain_sentences(text, args.sentences)
        t0 = time.perf_counter()
        word_answers = [r.text for r in g.generate_text_many(words, alphabet="espeak")]
        sentence_answers = [r.text for r in g.generate_text_many(sentences, alphabet="espeak", punctuation=True)]
        seconds = time.perf_counter() - t0
    report = {
        "command": "python -m benchmarks.espeak_distance " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.processor() or platform.machine(),
        "corpus": str(args.corpus / args.glob),
        "attnserve_seconds": round(seconds, 2),
        "words": compare(words, word_answers, keys),
        "sentences": compare(sentences, sentence_answers, keys),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for name in ("words", "sentences"):
        r = report[name]
        print(
            f"{name} ({r['n']}): marks kept {r['marks_kept']}, removed {r['marks_removed']}, "
            f"outside Piper's map {r['characters_outside_piper_map']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
