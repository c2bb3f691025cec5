"""The language a word-level bundle reads: en-us, by these names. A request for another is refused, not ignored."""

from __future__ import annotations

from attnserve.service.errors import InvalidRequest

LANGUAGE = "en-us"
# compared case-insensitively, `_` read as `-`: "en", "en-us", "en_US", "EN-US"
ALIASES = frozenset({"en", "en-us"})


def check_language(language: str | None) -> None:
    """None (not sent) or en-us under one of its names passes; anything else is an InvalidRequest of `language`."""
    if language is None or language.strip().casefold().replace("_", "-") in ALIASES:
        return
    raise InvalidRequest(f"{language!r} is not supported: this model reads {LANGUAGE} (also written en, en_US)", "language")
