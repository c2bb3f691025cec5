"""Serving: the model bundle loader, the ONNX Runtime decode engine and the HTTP API (no torch here)."""
