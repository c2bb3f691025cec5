"""Serving (no torch here): three layers, each importing only those below it (pyproject.toml's import-linter contracts).

cli, client        entry points: attnserve-serve, attnserve-generate, the in-process Generator
http/              the HTTP API: app, routes, schemas, validation, status codes
settings           the server's knobs (ATTNSERVE_*), with defaults read from the layers below
text/              reading text, the lexicon, and the request layer every front end shares
engine/            bundle, ONNX Runtime sessions, decoding, the continuous-batching scheduler
errors, metrics, version, extras   leaves any layer may import

May import no torch, `training` or `export` (a serving install has none of them); below http/ no fastapi or
starlette; no import cycles among the modules of any of its packages.
"""

from attnserve.service.extras import command

# the entry points: one line naming the extra when ONNX Runtime is missing
serve_main = command("attnserve-serve", "attnserve.service.cli:serve_main", "cpu")
generate_main = command("attnserve-generate", "attnserve.service.cli:generate_main", "cpu")
