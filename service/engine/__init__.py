"""The decode engine: bundle loading, ONNX Runtime sessions, the batched decode loop, decoding
strategies, the continuous-batching scheduler and the explain engine.

Owns token ids and tensors only. It may import the top-level leaves of `service` (errors,
metrics, version) and nothing from `service.settings`, `service.text` or `service.http`.
"""
