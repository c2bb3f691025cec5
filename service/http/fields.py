"""Fields a request body has that this server does not know: ignored, named, or refused when they look misspelt.

Clients and load testers send vendor fields (vLLM's `ignore_eos`, OpenAI's `store`, ...), and the API
documents that unknown fields are ignored, as TGI and OpenAI-compatible servers do. Two things change that
into something a user can see:

- a field whose name is close to one of this server's (`alphabett`, `max_new_token`, `pronunciation`,
  `Temperature`, `max-new-tokens`) is refused: a 422 on the TGI routes, OpenAI's 400 with `param` on /v1,
  with "did you mean `alphabet`?". Close means: the same name once case, hyphens and camelCase are
  normalised, or a `difflib` similarity ratio of at least `CLOSE_RATIO` (one or two letters wrong in
  a name of eight). Names that vendors really use and that happen to be close to one of ours
  (`min_new_tokens`, `min_tokens`) are in `VENDOR_FIELDS` and stay ignored;
- every other ignored field is named in the response header `x-attnserve-ignored-fields` (comma-separated,
  `parameters.` in front of a field inside TGI's `parameters`) and logged once per name (INFO).
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
from collections.abc import Collection, Iterable
from urllib.parse import quote

log = logging.getLogger("attnserve.service")

HEADER = "x-attnserve-ignored-fields"
CLOSE_RATIO = 0.85
# fields other servers define whose names are close to one of this server's: a client that sends them means them
VENDOR_FIELDS = frozenset(
    {"min_new_tokens", "min_tokens", "max_length", "min_length", "top_a", "min_p", "stop_token_ids", "stop_sequences"}
)
MAX_SHOWN = 32  # names in the header; a body with more unknown fields shows the first ones
MAX_LOGGED = 1024  # distinct names logged once each; past that, no more lines (a bound on what is kept)

_logged: set[str] = set()
_logged_lock = threading.Lock()
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def normalise(name: str) -> str:
    """`maxNewTokens`, `Max-New-Tokens` -> `max_new_tokens`."""
    return _CAMEL.sub(r"_\1", name).replace("-", "_").lower()


def close_match(name: str, known: Collection[str]) -> str | None:
    """The known name `name` looks like a misspelling of; None when it is not close to any (or is a vendor's)."""
    norm = normalise(name)
    if norm in VENDOR_FIELDS:
        return None
    if norm in known:
        return norm
    found = difflib.get_close_matches(norm, known, n=1, cutoff=CLOSE_RATIO)
    return found[0] if found else None


def header_value(names: Iterable[str]) -> str:
    """The header's value: the names, percent-encoded where a character could not go in a header."""
    shown = [quote(n, safe="!#$&'*+-.^_`|~") for n in sorted(names)[:MAX_SHOWN]]
    return ",".join(shown)


def log_once(names: Iterable[str], route: str) -> None:
    """One INFO line the first time each ignored field name is seen by this process."""
    with _logged_lock:
        new = [n for n in names if n not in _logged]
        if len(_logged) + len(new) > MAX_LOGGED:
            new = new[: max(0, MAX_LOGGED - len(_logged))]
        _logged.update(new)
    if new:
        log.info("ignored unknown field(s) on %s, named in the %s header: %s", route, HEADER, ", ".join(sorted(new)))
