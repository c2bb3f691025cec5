"""The HTTP layer: the app factory, the generation routes' handler, the other routes, request schemas and validation,
responses, middleware, logs and the service state. The only layer that knows status codes.

May import `service.settings`, `service.text`, `service.engine` and the top-level leaves of `service`
(errors, metrics, version, extras); never the entry points (`service.cli`, `service.client`,
`service.demo_request`). Its modules and subpackages (routes/, openai/) form no import cycle.
"""
