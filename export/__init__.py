"""Export: ONNX graphs with a KV-cached one-step decoder, variants, parity proof, and the model bundle."""
