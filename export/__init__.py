"""Export: a training run (Contract 1) -> a verified model bundle (Contract 2), in three stages.

- `graphs/`: the ONNX writers: v1 traced from the PyTorch model, v2 fused by hand from its weights, the int8
  and fp16 rewrites, and what every graph records (opset, IR version, io). Imports no other stage.
- `checks/`: the proofs over written graphs: the parity corpus and suite (`verify`), graph-level numbers,
  the variants beside fp32, the one batch-invariance check with its step runners, fp16's gate, speed.
  Imports `graphs/`.
- `pipeline/`: the build: its steps, the int8 gate, requantize, calibration, the parts a bundle carries
  (v2 decoders, explain graph, lexicon, context, the fp16 variant) and the manifest. Imports both above.
- commands over them: `cli.py` (attnserve-export), `bench.py` (attnserve-bench, with `ct2.py`),
  `gpu_check/` (attnserve-gpu-check); `errors.py` is the stages' one error.

Each stage imports only those above it in this list (the import-linter contract "export layers" in
pyproject.toml). export/ may import `training/` (the model, its data, its decode loop: the reference) and
`service/` (the bundle loader and the engine, so parity is proven on the loop the service runs); neither
imports export/. torch is imported only by the v1 writer, the PyTorch reference and the build; `add-variant`,
`attnserve-gpu-check` and `verify` without a run need none.
"""

from attnserve.service.extras import command

# the entry points: one line naming the extra when it is missing
main = command("attnserve-export", "attnserve.export.cli:main", "train", "cpu")
bench_main = command("attnserve-bench", "attnserve.export.bench:main", "train", "cpu")
# no torch and no training extra: ONNX Runtime (either wheel) and onnx, which the gpu extra brings
gpu_check_main = command("attnserve-gpu-check", "attnserve.export.gpu_check.cli:main", "cpu")
