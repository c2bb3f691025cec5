"""OpenAI's API over the same engine, request layer, limits, auth and metrics as the TGI routes.

    routes.py       POST /v1/completions, POST /v1/chat/completions, GET /v1/models
    completions.py  the edge: an OpenAI body -> the request layer's requests (`plan`), the answers in OpenAI's shapes
    streaming.py    a streamed answer: the chunks per wake-up of the engine, the usage chunk, [DONE]
    schemas.py      the request and response bodies (/docs)
    errors.py       OpenAI's error shape on /v1/*, and each route's table of names (internal option -> param)

May import service/http/'s modules (errors, fields, schemas, state, dependencies, ...) and the layers below
it, never the app factory (service/http/app.py), which alone imports it.
"""
