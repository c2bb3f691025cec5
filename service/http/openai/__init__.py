"""OpenAI's API over the same engine, request layer, limits, auth and metrics as the TGI routes.

    routes.py       POST /v1/completions, POST /v1/chat/completions, GET /v1/models
    completions.py  OpenAI's parameters as the TGI routes' requests (Service.admit), the answers in OpenAI's shapes
    schemas.py      the request and response bodies (/docs)
    errors.py       OpenAI's error shape on /v1/*

Imports service/http/ and what it imports; nothing imports it but the app factory.
"""
