"""attnserve: train an encoder-decoder Transformer, export it to ONNX with a KV cache, serve it.

The library (`pip install attnserve`, the default English G2P model inside):

    import attnserve
    sentences = attnserve.phonemize("Dr. Smith arrived at 5 p.m. He paid $5.")   # espeak-ng IPA, as Piper reads it
    sentences[0].phonemes, [(w.text, w.start, w.end, w.phonemes) for w in sentences[0].words]

`phonemize`, `phonemize_stream`, `Phonemizer`, `Sentence`, `Word` and `to_piper_ids` are
attnserve.service.phonemizer's; `Generator` is the in-process engine (attnserve.service.client).

The stages install under this one namespace, each from its top-level folder in the repository
(`attnserve/service` etc. are links to `service/`, `training/`, `export/`, `loadtest/`, so a
checkout imports exactly what a wheel installs):

- `attnserve.training`: the PyTorch model, data, tokenizers and the training loop (extra `[train]`);
- `attnserve.export`: ONNX graphs, parity proofs and the model bundle (extra `[train]`);
- `attnserve.service`: the bundle loader, the engine, the reader of text, the library and the HTTP server
  (the server's web stack is the extra `[serve]`);
- `attnserve.loadtest`: the load tester (extra `[loadtest]`).

Nothing is imported here eagerly, so `import attnserve` costs nothing and needs no extra: each name above is
imported on first use.
"""

import importlib

_LAZY = {
    "phonemize": "attnserve.service.phonemizer",
    "phonemize_stream": "attnserve.service.phonemizer",
    "Phonemizer": "attnserve.service.phonemizer",
    "Sentence": "attnserve.service.phonemizer",
    "Word": "attnserve.service.phonemizer",
    "to_piper_ids": "attnserve.service.phonemizer",
    "Generator": "attnserve.service.client",
}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name == "__version__":
        from attnserve.service.version import version

        return version()
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next look-up finds it here
        return value
    raise AttributeError(f"module 'attnserve' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
