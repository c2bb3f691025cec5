"""The HTTP routes, one router per resource; service/app.py includes them."""
