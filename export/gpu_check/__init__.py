"""`attnserve-gpu-check [--out DIR] [--bundle B] [--provider cuda|cpu]`: the CUDA path proven in one command.

Five steps, each in its own time bound, each failure recorded and the next step run anyway:
- machine: GPU, driver, the CUDA and cuDNN libraries ONNX Runtime loaded, its version and providers;
- variant: `add-variant fp16` on a COPY of the bundle (export/pipeline/add_variant.py);
- verify: on the device, greedy, seeded sampling and beam 4 alone, in static and in continuous batches;
  fp16 greedy against the fp32 reference (agreement, near-ties); where the cache and cross K/V live;
- bench: fp16 v2 against fp32 v1 (and PyTorch's cached decoder when torch is importable), at batch
  1/32/128 x 8/32/128 tokens (capped at the model's max_target_len), export/bench.py's cells;
- serve: `attnserve-serve` in a subprocess on 127.0.0.1, 300 of the bundle's own sample inputs (`GET /samples`,
  its parity corpus: any model's task) from 32 concurrent clients against each input alone (greedy and
  seeded), beam 4 likewise over 64 of them, `/score` of their greedy
  answers against the log-probabilities the generation reported, one `/v1/chat/completions` answer against
  `/generate`'s, and /info's variant and provider.
`--provider cpu` is its dry run on the int8 and fp32 variants (int8 falls back to v1 where the runtime
lacks the v2 kernels, and says so; onnxruntime-gpu 1.31.1's CPU provider has them). Writes DIR/report.json
and DIR/report.md; exits 1 when a step failed.

Needs no torch, no training extra and no network: ONNX Runtime, onnx, and the service's own dependencies.
Each step imports what it runs inside its own function: an install that cannot import it fails that step,
which the report records, instead of the whole command. One module per step (`machine`, `verify` for the
variant and verify steps, `bench`, `serve`), `report` for report.md, `cli` for the flags and the runner.
"""
