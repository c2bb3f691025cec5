"""The decode engine: bundle loading, ONNX Runtime sessions (runtime.py, the one adapter over its calls), the
batched decode loop (engine.py, batch.py, slots.py), decoding in one room per job (options.py, processors.py,
stopping.py, beam.py, rows.py, and step.py, the step pipeline every decode loop calls), the continuous-batching
scheduler and the explain engine.

Owns token ids and tensors only. It may import the top-level leaves of `service` (errors,
metrics, version) and nothing from `service.settings`, `service.text` or `service.http`.
"""
