"""Serving: the model bundle loader, the ONNX Runtime decode engine and the HTTP API (no torch here)."""

from service.extras import command

# the entry points: one line naming the extra when ONNX Runtime is missing
serve_main = command("attnserve-serve", "service.cli:serve_main", "cpu")
generate_main = command("attnserve-generate", "service.cli:generate_main", "cpu")
