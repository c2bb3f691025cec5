"""A bundle's context component: heteronyms chosen by the sentence (read by service/text/context.py).

`attnserve-export build` copies it when the run directory holds one (`context.json.gz`, written by
`attnserve-train context`); `add_context` gives an existing bundle one without touching its graphs: it copies
the file, adds its sha256 to `files` and the `context` field to `bundle.json`, and leaves every other field
as it was. The component only reorders the lexicon's pronunciations, so the bundle must have a lexicon that
lists every pronunciation the component chooses among.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from attnserve.export.pipeline.lexicon import with_fields_after
from attnserve.service.engine.bundle import load_bundle, sha256_file, write_bundle_json
from attnserve.service.text.context import CONTEXT_FILE, ContextChooser
from attnserve.service.text.lexicon import read_lexicon_file


def run_has_context(run_dir: Path) -> bool:
    return (Path(run_dir) / CONTEXT_FILE).is_file()


def write_context(bundle_dir: Path, run_dir: Path, lexicon_file: Path | None, log: Callable = print) -> dict:
    """Copy run_dir/context.json.gz into `bundle_dir`, checked against the bundle's lexicon; returns the
    `context` field for bundle.json. Raises ValueError when the lexicon lacks a pronunciation it chooses."""
    src = Path(run_dir) / CONTEXT_FILE
    if not src.is_file():
        raise ValueError(f"{src}: no context component in this run (write one with: attnserve-train context --out {run_dir})")
    chooser = ContextChooser.load(src)
    if lexicon_file is None:
        raise ValueError("the bundle has no lexicon: the context component chooses among the lexicon's pronunciations")
    entries: dict[str, list[str]] = {}
    for _, source, target in read_lexicon_file(lexicon_file):
        entries.setdefault(source, []).append(target)
    data = json.loads(gzip.decompress(src.read_bytes()))
    for word, h in data["homographs"].items():
        missing = [c for c in h["classes"] if c not in entries.get(word, [])]
        if missing:
            raise ValueError(f"{src}: {word!r} chooses {', '.join(missing)}, which the bundle's lexicon does not list")
    shutil.copyfile(src, Path(bundle_dir) / CONTEXT_FILE)
    field = {"file": CONTEXT_FILE, "format": "json.gz", "model": "logistic-regression", "homographs": chooser.homographs}
    report = Path(run_dir) / "heldout.json"
    if report.is_file():
        held = json.loads(report.read_text())
        field["heldout"] = {"sentences": held["sentences"], "accuracy": held["accuracy"]}
    size = (Path(bundle_dir) / CONTEXT_FILE).stat().st_size
    log(f"[export] {CONTEXT_FILE}: {len(chooser.homographs)} homographs, {size / 1e6:.2f} MB")
    return field


def add_context(bundle_dir: Path, run_dir: Path, log: Callable = print) -> dict:
    """Give the bundle in `bundle_dir` the context component of `run_dir`; returns the new bundle.json.
    The bundle is verified before (every hash) and after (the service's loader); its graphs are not touched."""
    bundle_dir = Path(bundle_dir)
    bundle = load_bundle(bundle_dir)
    field = write_context(bundle_dir, run_dir, bundle.lexicon_path, log)
    meta = with_fields_after(bundle.meta, "lexicon", {"context": field})
    meta["files"] = {**meta["files"], CONTEXT_FILE: sha256_file(bundle_dir / CONTEXT_FILE)}
    write_bundle_json(bundle_dir, meta)
    load_bundle(bundle_dir)  # the service's own loader must accept what we wrote
    return meta
