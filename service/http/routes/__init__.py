"""The HTTP routes, one router per resource; service/http/app.py includes them."""
