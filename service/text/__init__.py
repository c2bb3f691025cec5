"""The text front end: reading input text into units, the lexicon, and the one request layer that
both the HTTP routes and the in-process `Generator` call, so they answer alike by construction.

May import `service.engine` and the top-level leaves of `service` (errors, metrics, version);
never `service.settings` or `service.http`.
"""
