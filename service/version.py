"""The installed attnserve version (shown by /info and in /docs)."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    try:
        return importlib.metadata.version("attnserve")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
