"""The operator's lexicon file (`--lexicon`, ATTNSERVE_LEXICON), read again when it changes, without a restart.

A server notices a change two ways: SIGHUP (read it now), or a check of the file's modification time, size and
inode at most once a second (`CHECK_INTERVAL_S`). Either way it reads the file whole, checks every line as at
start-up (service/text/lexicon.py), and only then swaps the new lexicon in, at once for every later request
(a request already admitted keeps the answers it was given). A bad file (a bad line, a missing file, a write
caught half-way) keeps the lexicon in use and logs one line naming the file and what is wrong; the file is
read again at its next change (or SIGHUP).

`LexiconWatcher` holds no thread of its own: `watch`, a task of the HTTP lifespan (service/http/app.py), calls
`changed` once a second, runs `read` in a worker thread, and installs what it returns on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from attnserve.service.text.lexicon import Lexicon, LexiconError

log = logging.getLogger("attnserve.service")

CHECK_INTERVAL_S = 1.0


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed file: (mtime in ns, size, inode); None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class LexiconWatcher:
    """Knows when the operator's file of `lexicon` has changed, and reads the new lexicon."""

    def __init__(self, lexicon: Lexicon):
        self.current = lexicon
        self.path: Path = lexicon.override_file
        self._seen = _stamp(self.path)

    def changed(self) -> bool:
        """Whether the file differs from the last one read (or tried). A missing file is a change once."""
        stamp = _stamp(self.path)
        if stamp == self._seen:
            return False
        self._seen = stamp
        return True

    def read(self) -> Lexicon | None:
        """The lexicon with the file read again; None, with one log line, when the file cannot be used."""
        try:
            lexicon = self.current.reloaded()
        except LexiconError as e:
            log.warning("lexicon not reloaded, the previous one stays in use: %s", e)
            return None
        return lexicon

    def installed(self, lexicon: Lexicon) -> None:
        """Record that `lexicon` is now in use, and say so."""
        self.current = lexicon
        log.info("lexicon reloaded from %s: %d sources, %d from the file", self.path, len(lexicon), lexicon.overridden)


async def watch(watcher: LexiconWatcher, install: Callable[[Lexicon], None], reload_now: asyncio.Event) -> None:
    """Until cancelled: once a second, or at once when `reload_now` is set (SIGHUP), read the file again if it changed
    (or was asked for) and `install` the new lexicon on this event loop's thread."""
    while True:
        try:
            await asyncio.wait_for(reload_now.wait(), CHECK_INTERVAL_S)
        except TimeoutError:
            pass
        asked = reload_now.is_set()
        reload_now.clear()
        if watcher.changed() or asked:
            lexicon = await asyncio.to_thread(watcher.read)
            if lexicon is not None:
                install(lexicon)
                watcher.installed(lexicon)


def on_sighup(loop: asyncio.AbstractEventLoop, reload_now: asyncio.Event) -> bool:
    """Set `reload_now` on SIGHUP; False where the loop cannot take signals (not the main thread, or no SIGHUP)."""
    if not hasattr(signal, "SIGHUP"):
        return False
    try:
        loop.add_signal_handler(signal.SIGHUP, reload_now.set)
    except (RuntimeError, ValueError, NotImplementedError):  # a server run in a thread (tests) has no signals
        return False
    return True
