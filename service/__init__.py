"""Serving (no torch here): seven layers, each importing only those below it (pyproject.toml's import-linter contracts).

cli, phonemizer, demo_request   entry points: attnserve-serve, attnserve-generate, the library (attnserve.phonemize),
                   make demo's request
client             the in-process Generator, which the library and attnserve-generate run on
http/              the HTTP API: app, routes, wire schemas (TGI and OpenAI), status codes
settings           the server's knobs (ATTNSERVE_*), with defaults read from the layers below
requests/          the request layer every front end shares: validation, admission, answers, streams, scoring
text/              reading text: words, spans and readings, the lexicon, heteronyms; knows nothing of requests
engine/            bundle, ONNX Runtime sessions, decoding, the continuous-batching scheduler
errors, metrics, version, extras   leaves any layer may import

May import no torch, `training` or `export` (a serving install has none of them); below http/ no fastapi or
starlette; no import cycles among the modules of any of its packages.
"""

from attnserve.service.extras import command

# the entry points: one line naming the extra when the web stack (the `serve` extra: the server's settings, shared by
# the bulk command) or ONNX Runtime is missing
serve_main = command("attnserve-serve", "attnserve.service.cli:serve_main", "serve", "cpu")
generate_main = command("attnserve-generate", "attnserve.service.cli:generate_main", "serve", "cpu")
