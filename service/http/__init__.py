"""The HTTP layer: the app factory, the generation routes' handler, the other routes, request schemas and their edges
(a body -> the request layer's `Request`), responses, middleware, logs and the service state. The only layer that
knows status codes and wire names.

May import `attnserve.service.settings`, `attnserve.service.requests`, `attnserve.service.text`,
`attnserve.service.engine` and the top-level leaves of `attnserve.service` (errors, metrics, version, extras); never
the entry points (`attnserve.service.cli`, `attnserve.service.client`, `attnserve.service.demo_request`). Its modules
and subpackages (routes/, openai/) form no import cycle.
"""
