"""Stage 1 of export: the ONNX graphs, written and rewritten, with no bundle.json and no checks.

- `v1`: the encoder and the KV-cached one-step decoder traced from the PyTorch model (needs torch);
- `v2`: the fused v2 decoder written by hand from a state_dict (numpy and onnx, no torch);
- `variants`: the rewrites into the int8 and fp16 variants;
- `format`: the opset, the IR version and a graph's recorded io (no torch);
- `encoder_simplify`: an encoder without its shape plumbing (bitwise the same); `encoder_attention`: its
  self-attention as MultiHeadAttention (not bitwise; shipped only behind the pipeline's gate); `encoder_fuse`:
  int8's Q, K, V projections and that attention as one QAttention (bitwise); `encoder_pack`: its per-token nodes
  on the real tokens only (every real position bitwise the same).
"""
