"""The request layer: the one place both the HTTP routes and the in-process `Generator` turn a request into
an answer, so they answer alike by construction.

Owns the internal request every front end builds once at its edge (request.py: `Request` of `DecodingOptions`,
`ReadingOptions` and `OutputOptions`, and the internal names its refusals use), the one validator (validation.py: a
Request -> ValidRequest), admission and answers (frontend.py, `RequestLayer` and `AdmittedRequest`), the answers'
domain objects (units.py: answers and tokens; http/ alone writes them as TGI or OpenAI JSON), the output alphabets of
an answer's tokens (alphabets.py), streams (streaming.py), scoring (scoring.py), the bundle's samples (samples.py), and
stack.py, where the HTTP service and the in-process Generator build the same scheduler, request layer and limits.

May import `attnserve.service.text` (reading text), `attnserve.service.engine` and the top-level leaves of `service`;
never `attnserve.service.settings`, `attnserve.service.http`, fastapi or starlette (pyproject.toml's import-linter contracts).
"""
