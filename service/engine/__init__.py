"""The decode engine: bundle loading, ONNX Runtime sessions, the batched decode loop, decoding
strategies, the continuous-batching scheduler and the explain engine.

Owns token ids and tensors only. It may import the top-level leaves of `service` (settings,
metrics, version, errors) and nothing from `service.text` or `service.http`.
"""
