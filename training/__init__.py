"""Training stage: a hand-written encoder-decoder Transformer in PyTorch (writes a run directory)."""
