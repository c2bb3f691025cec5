"""attnserve: train an encoder-decoder Transformer, export it to ONNX with a KV cache, serve it.

The stages install under this one namespace, each from its top-level folder in the repository
(`attnserve/service` etc. are links to `service/`, `training/`, `export/`, `loadtest/`, so a
checkout imports exactly what a wheel installs):

- `attnserve.training`: the PyTorch model, data, tokenizers and the training loop (extra `[train]`);
- `attnserve.export`: ONNX graphs, parity proofs and the model bundle (extra `[train]`);
- `attnserve.service`: the bundle loader, the engine, the reader of text and the HTTP server
  (the server's web stack is the extra `[serve]`);
- `attnserve.loadtest`: the load tester (extra `[loadtest]`).

Nothing is imported here eagerly, so `import attnserve` costs nothing and needs no extra.
"""


def __getattr__(name: str):
    if name == "__version__":
        from attnserve.service.version import version

        return version()
    raise AttributeError(f"module 'attnserve' has no attribute {name!r}")
