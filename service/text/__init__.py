"""Reading text: text in; words, their character spans and their readings out. Knows nothing of requests,
streams, limits or answers: that is the request layer (service/requests/), which calls this package.

Owns running text read as words (reader.py; the written-form stage: tokens.py tags, spoken.py and forms.py
verbalise, words.py reads words by their neighbours and case; characters in normalize.py; the tables are TSV files
in tables/, loaded by rules.py), the lexicon and its reload (lexicon.py, lexicon_watch.py), the words it knows beyond
its bundle's dictionary and the words read in parts by their case or dots (pronounced.py), the heteronym chooser
(context.py), per-request pronunciations (pronunciations.py) and the IPA of ARPAbet (ipa.py).

May import `attnserve.service.engine` and the top-level leaves of `service` (errors, metrics, version, extras);
never `attnserve.service.requests`, `attnserve.service.settings`, `attnserve.service.http`, fastapi or starlette (pyproject.toml's
import-linter contracts).
"""
