"""The decode engine: ids in, ids out, on ONNX Runtime.

Owns:
- the bundle (bundle.py: reading and checking bundle.json) and the graphs' input and output names (names.py);
- ONNX Runtime sessions and the calls a step makes (runtime.py, the one adapter over its calls);
- the batched decode loop: engine.py (encoder, `new_batch`, `step`, `generate`) over one batch contract
  (contract.py), implemented once by slots.py: each row's cache in a slot, stepped by the v2 decoder
  (`kv_cache: "in_place"`) or, through the v1 adapter, by the v1 graph (`"concat"`); the engine picks the step
  once at load and lends each batch its decoder and buffer pool;
- decoding in one room per job (options.py, processors.py, stopping.py, beam.py, rows.py, and step.py, the step
  pipeline every decode loop calls), teacher forcing (scoring.py);
- the continuous-batching scheduler (scheduler.py, the engine thread; tickets.py, what its owners hold) and the
  explain engine (explain.py).

Token ids and tensors only: no text rules, no wire formats. It may import numpy, onnxruntime, tokenizers and the
top-level leaves of `attnserve.service` (errors, metrics, version), and nothing from `attnserve.service.settings`,
`attnserve.service.text` or `attnserve.service.http` (nor fastapi or starlette).
"""
