"""Fields a request body has that this server does not know: ignored, named, or refused when they look misspelt.

Clients and load testers send vendor fields (vLLM's `ignore_eos`, OpenAI's `store`, ...), and the API
documents that unknown fields are ignored, as TGI and OpenAI-compatible servers do. Two things change that
into something a user can see:

- a field whose name is close to one of this server's (`alphabett`, `max_new_token`, `pronunciation`,
  `Temperature`, `max-new-tokens`) is refused: a 422 on the TGI routes, OpenAI's 400 with `param` on /v1,
  with "did you mean `alphabet`?". Close means: the same name once case, hyphens and camelCase are
  normalised, or a `difflib` similarity ratio of at least `CLOSE_RATIO` (one or two letters wrong in
  a name of eight). Names that vendors really use and that happen to be close to one of ours
  (`min_length`, `max_length`; `min_tokens` on the TGI routes) are in `VENDOR_FIELDS` and stay ignored. The rule
  (`close_match`) is the one validator's (service/requests/validation.py), which the in-process client's keyword
  arguments meet too;
- every other ignored field is named in the response header `x-attnserve-ignored-fields` (comma-separated,
  `parameters.` in front of a field inside TGI's `parameters`) and logged once per name (INFO).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from urllib.parse import quote

log = logging.getLogger("attnserve.service")

HEADER = "x-attnserve-ignored-fields"
MAX_SHOWN = 32  # names in the header; a body with more unknown fields shows the first ones
MAX_LOGGED = 1024  # distinct names logged once each; past that, no more lines (a bound on what is kept)

_logged: set[str] = set()
_logged_lock = threading.Lock()


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
