"""The text front end: reading input text into units, the lexicon, and the one request layer that
both the HTTP routes and the in-process `Generator` call, so they answer alike by construction.

Owns running text read as words (reader.py; its rules in tokens.py, spoken.py, words.py; characters in
normalize.py, word tables in rules.py), the lexicon and its reload, the heteronym chooser (context.py),
the output forms (forms.py, ipa.py), pronunciations, scoring, the one validator (validation.py: a request
-> ValidRequest whose refusals name their field), the request layer (requests.py) with its domain objects
(units.py: answers and tokens; http/ alone writes them as TGI or OpenAI JSON), and stack.py, where the HTTP
service and the in-process Generator build the same scheduler, request layer and validator.

May import `service.engine` and the top-level leaves of `service` (errors, metrics, version, extras);
never `service.settings`, `service.http`, fastapi or starlette (pyproject.toml's import-linter contracts).
"""
