"""The HTTP routes, one router per resource (docs, explain, generate, health, samples, score); service/http/app.py
includes them, and the fast path (service/http/fastpath.py) calls generate's handlers.

May import service/http/'s modules below the app (errors, schemas, validation, responses, state, dependencies)
and the layers below http; never the app factory or the entry points.
"""
