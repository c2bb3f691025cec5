"""The decode engine: ids in, ids out, on ONNX Runtime.

Owns:
- the bundle (bundle.py: reading and checking bundle.json) and the graphs' input and output names (names.py);
- ONNX Runtime sessions and the calls a step makes (runtime.py, the one adapter over its calls);
- the batched decode loop: engine.py (encoder, `new_batch`, `step`, `generate`) over one batch contract
  (contract.py), which both cache kinds implement: batch.py (v1, `kv_cache: "concat"`) and slots.py (v2,
  `"in_place"`); the engine picks the kind once at load and lends each batch its decoder and buffer pool;
- decoding in one room per job (options.py, processors.py, stopping.py, beam.py, rows.py, and step.py, the step
  pipeline every decode loop calls), teacher forcing (scoring.py);
- the continuous-batching scheduler (scheduler.py, the engine thread; tickets.py, what its owners hold) and the
  explain engine (explain.py).

Token ids and tensors only: no text rules, no wire formats. It may import numpy, onnxruntime, tokenizers and the
top-level leaves of `service` (errors, metrics, version), and nothing from `service.settings`, `service.text` or
`service.http` (nor fastapi or starlette).
"""
