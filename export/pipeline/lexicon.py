"""A bundle's lexicon: the training dictionary shipped as known answers (read by service/text/lexicon.py).

`attnserve-export build --lexicon` calls `write_lexicon` while it builds; `add_lexicon`
gives an existing bundle one (and the word-level flag) without re-exporting its graphs:
it writes `lexicon.tsv.gz`, adds its sha256 to `files` and its fields to `bundle.json`,
and leaves every other field as it was.

The dictionary is every source of the dataset in every split with all its targets, in the
dataset's order (for CMUdict: every pronunciation, in CMUdict's order), stress removed
when the model was trained without it. Sources are stored normalised by the bundle's
source tokenizer; an entry the model's tokenizers cannot express (a character or a
phoneme missing from its vocabularies) is left out and counted in `dropped`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.service.engine.bundle import load_bundle, sha256_file, write_bundle_json
from attnserve.service.text.lexicon import LEXICON_FILE, write_lexicon_file
from attnserve.training.data import load_dictionary

BUNDLE_JSON = "bundle.json"


def dictionary_entries(
    dataset: str, strip_stress: bool, src_tok: Tokenizer, tgt_tok: Tokenizer
) -> tuple[dict[str, list[str]], int]:
    """(normalised source -> targets best first, number of (source, target) pairs left out)."""
    grouped = load_dictionary(dataset, strip_stress)
    sources = list(grouped)
    pairs = [(i, t) for i, src in enumerate(sources) for t in grouped[src]]
    src_unk, tgt_unk = src_tok.token_to_id("<unk>"), tgt_tok.token_to_id("<unk>")
    src_ok = [bool(e.ids) and src_unk not in e.ids for e in src_tok.encode_batch(sources, add_special_tokens=False)]
    tgt_enc = tgt_tok.encode_batch([t for _, t in pairs], add_special_tokens=False)
    normalizer = src_tok.normalizer
    entries: dict[str, list[str]] = {}
    dropped = 0
    for (i, target), enc in zip(pairs, tgt_enc):
        if not src_ok[i] or not enc.ids or tgt_unk in enc.ids:
            dropped += 1
            continue
        source = normalizer.normalize_str(sources[i]) if normalizer is not None else sources[i]
        text = " ".join(target.split())  # one space between tokens, as a target file has
        targets = entries.setdefault(source, [])
        if text not in targets:
            targets.append(text)
    return entries, dropped


def write_lexicon(
    bundle_dir: Path, dataset: str, strip_stress: bool, src_tok: Tokenizer, tgt_tok: Tokenizer, log: Callable = print
) -> dict:
    """Write bundle_dir/lexicon.tsv.gz from `dataset`; returns the `lexicon` field for bundle.json."""
    entries, dropped = dictionary_entries(dataset, strip_stress, src_tok, tgt_tok)
    if not entries:
        raise ValueError(f"dataset {dataset!r} gives no lexicon entry the model's tokenizers can express")
    write_lexicon_file(bundle_dir / LEXICON_FILE, entries)
    field = {
        "file": LEXICON_FILE,
        "format": "tsv.gz",
        "dataset": dataset,
        "sources": len(entries),
        "targets": sum(len(t) for t in entries.values()),
        "dropped": dropped,
    }
    size = (bundle_dir / LEXICON_FILE).stat().st_size
    counts = f"{field['sources']} sources, {field['targets']} targets, {dropped} left out"
    log(f"[export] {LEXICON_FILE}: {counts}, {size / 1e6:.2f} MB")
    return field


def add_lexicon(
    bundle_dir: Path, dataset: str | None = None, word_level_source: bool | None = None, log: Callable = print
) -> dict:
    """Give the bundle in `bundle_dir` its training dictionary as a lexicon; returns the new bundle.json.

    `dataset` defaults to the one bundle.json records; `word_level_source` to True for a G2P
    bundle. The bundle is verified before (every hash) and after (the service's loader)."""
    bundle_dir = Path(bundle_dir)
    bundle = load_bundle(bundle_dir)
    meta = bundle.meta
    dataset = dataset or meta.get("dataset")
    if not dataset:
        raise ValueError(f"{bundle_dir / BUNDLE_JSON} records no dataset: pass --dataset")
    src_tok = Tokenizer.from_file(str(bundle.src_tokenizer_path))
    tgt_tok = Tokenizer.from_file(str(bundle.tgt_tokenizer_path))
    field = write_lexicon(bundle_dir, dataset, bool(meta.get("strip_stress", False)), src_tok, tgt_tok, log)
    if word_level_source is None:
        word_level_source = meta.get("task", "g2p") == "g2p"
    meta = with_fields_after(meta, "strip_stress", {"word_level_source": word_level_source, "lexicon": field})
    meta["files"] = {**meta["files"], LEXICON_FILE: sha256_file(bundle_dir / LEXICON_FILE)}
    write_bundle_json(bundle_dir, meta)
    load_bundle(bundle_dir)  # the service's own loader must accept what we wrote
    return meta


def with_fields_after(meta: dict, anchor: str, fields: dict) -> dict:
    """`meta` with `fields` set; new keys go right after `anchor` (at the end without it), so
    bundle.json keeps its order and an existing field keeps its place."""
    new = {k: v for k, v in fields.items() if k not in meta}
    out: dict = {}
    for key, value in meta.items():
        out[key] = fields.get(key, value)
        if key == anchor:
            out.update(new)
    out.update(new)  # no anchor: at the end
    return out
