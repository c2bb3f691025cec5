"""Stage 2 of export: the proofs a written bundle must pass, read from its graphs and its parity corpus.

- `corpus`: the parity corpus and its PyTorch reference (torch only where the reference is computed);
- `graph_parity`: the graphs' numbers against PyTorch (or against themselves without the run);
- `parity`: the parity suite (`attnserve-export verify`) through the service's own engine;
- `variant_parity`: fp16, int8 and the v2 variants beside fp32; `fp16`: the fp16 gate's measurements;
- `steps`, `invariance`: the v2 step runner, and the one batch-invariance check that takes a step runner;
- `explain`: decoder.explain.onnx's attention against PyTorch; `speed`: the engine's speed at batch 1 and 32.
"""
