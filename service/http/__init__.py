"""The HTTP layer: the app factory, the fast path, routes, request schemas and validation,
responses, middleware, logs and the service state. The only layer that knows status codes.

May import `service.text`, `service.engine` and the top-level leaves of `service`.
"""
