"""Export: ONNX graphs with a KV-cached one-step decoder, variants, parity proof, and the model bundle."""

from service.extras import command

# the entry points: one line naming the extra when it is missing
main = command("attnserve-export", "export.cli:main", "train", "cpu")
bench_main = command("attnserve-bench", "export.bench:main", "train", "cpu")
# no torch and no training extra: ONNX Runtime (either wheel) and onnx, which the gpu extra brings
gpu_check_main = command("attnserve-gpu-check", "export.gpu_check.cli:main", "cpu")
