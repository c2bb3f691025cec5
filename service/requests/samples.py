"""Sample inputs of a bundle's own task: what `GET /samples` and `Generator.samples` offer, and what the load
testers send when not given inputs.

The export writes `parity_corpus.json` (hashed in `bundle.json` like every file) with the sources it proved
parity on: inputs of the model's own task, whatever that task is. Only the sources the request layer reads as
they are, one unit with the source ids the model reads the whole text as, are offered (for a word-level bundle
CMUdict's "a.d." reads as two words and "'gain" as "gain"), so each sample is one answer of the model, the
same over HTTP as in process.
"""

from __future__ import annotations

import json

from attnserve.service.engine.bundle import LoadedBundle
from attnserve.service.engine.engine import InputError
from attnserve.service.errors import InvalidRequest
from attnserve.service.requests.frontend import RequestLayer

MAX_SAMPLES = 500  # "a few hundred": enough that a load test's rows vary, small enough to send at once

_OFFERED: dict[str, list[str]] = {}  # bundle.json's sha256 -> its samples (read once per process)


def parity_sources(bundle: LoadedBundle) -> list[str]:
    """The parity corpus' sources; [] when the bundle has none."""
    name = bundle.meta.get("parity_corpus")
    if not name:
        return []
    try:
        corpus = json.loads((bundle.dir / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    sources = corpus.get("sources") if isinstance(corpus, dict) else None
    if not isinstance(sources, list):
        return []
    return [s for s in sources if isinstance(s, str) and s.strip()]


def read_as_is(front: RequestLayer, source: str) -> bool:
    """Whether the request layer reads `source` as one unit (one word of a word-level bundle, or a whole input) with
    the source ids the model reads the whole text as."""
    try:
        units = front.units(source, None)
        return len(units) == 1 and units[0].source_ids == front.engine.tokenize_text(source)
    except (InvalidRequest, InputError):
        return False


def sample_inputs(front: RequestLayer) -> list[str]:
    """At most MAX_SAMPLES parity sources read as they are, in the corpus' order; [] when the bundle has none."""
    bundle = front.engine.bundle
    if bundle.sha256 not in _OFFERED:
        _OFFERED[bundle.sha256] = [s for s in parity_sources(bundle) if read_as_is(front, s)][:MAX_SAMPLES]
    return _OFFERED[bundle.sha256]
