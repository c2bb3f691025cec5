"""The HTTP routes other than generation (service/http/generation.py), one router per resource (docs, explain,
health, samples, score); service/http/app.py includes them.

May import service/http/'s modules below the app (errors, schemas, validation, responses, state, dependencies)
and the layers below http; never the app factory or the entry points.
"""
