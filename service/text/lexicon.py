"""A lexicon: known answers looked up before the model (no torch).

A lexicon maps a source (for G2P, a word) to one or more targets, best first: a
pronunciation dictionary for G2P, a translation memory for MT. A bundle may carry one
(`bundle.json` field `lexicon`, its file listed in `files` with its sha256), and an
operator may add or override entries with a TSV file of their own.

File format, the same for both (the bundle's is gzip-compressed, `lexicon.tsv.gz`):
UTF-8 text, one `source<TAB>target` per line. A source with several targets has several
lines, in order of preference (CMUdict's order for the default model). In an operator's
file, blank lines and lines starting with `#` are skipped, and a source listed there
replaces all of the bundle's targets for that source.

Lookups normalise the source as the bundle's source tokenizer does (NFKC and lower-case
for G2P), so "Hello" finds "hello". The bundle's file is written with its sources already
normalised and its targets checked against the target vocabulary (export/pipeline/lexicon.py), and
its hash is verified by the bundle loader, so loading it does not check each entry again;
an operator's file is checked line by line, and a bad line stops start-up with one line
naming the file and the line number.

For a word-level bundle, the table of service/text/pronounced.py (tables/pronounced.tsv: tech words, brands, names
and loanwords) is served with the bundle's entries: its readings of a word first, the bundle's after them. An
operator's file replaces both.

Answers carry the target tokenizer's own ids, so a lexicon answer is a real token sequence.
Evaluation never reads a lexicon: it scores the model alone.
"""

from __future__ import annotations

import gc
import gzip
import io
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.service.engine.bundle import LoadedBundle
from attnserve.service.text.pronounced import served_first

LEXICON_FILE = "lexicon.tsv.gz"  # the file name `attnserve-export` gives a bundle's lexicon


LOOKUPS_KEPT = 1 << 16  # distinct words whose answers a lexicon keeps (`lookup`); more start the cache again


class LexiconError(ValueError):
    """A lexicon file cannot be used; one line naming the file (and line)."""


@dataclass(frozen=True)
class LexiconAnswer:
    """One target for a source: its text as the target tokenizer decodes it, and its ids
    (no bos/eos), e.g. ("HH AH0 L OW1", (37, 10, 46, 51))."""

    text: str
    ids: tuple[int, ...]


def _lexicon_text(path: Path) -> str:
    """A lexicon file's text (gunzipped when the name ends in .gz); LexiconError naming the file and line."""
    if not path.is_file():
        raise LexiconError(f"lexicon file not found: {path}")
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise LexiconError(f"{path}: not a gzip file ({e})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise LexiconError(f"{path}:{line}: not valid UTF-8 ({e.reason})") from None


def read_lexicon_file(path: Path, comments: bool = False) -> Iterator[tuple[int, str, str]]:
    """(line number, source, target) of each entry of a TSV file (gzip when the name ends in .gz).

    `comments`: skip blank lines and lines starting with '#' (operators' files).
    Raises LexiconError naming the file and line for a line that is not `source<TAB>target`.
    """
    return _entries_of(path, _lexicon_text(path), comments)


def _entries_of(path: Path, text: str, comments: bool) -> Iterator[tuple[int, str, str]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if comments and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cols = line.split("\t")
        if len(cols) != 2:
            raise LexiconError(f"{path}:{lineno}: expected 'source<TAB>target', found {len(cols)} column(s)")
        source, target = cols[0].strip(), cols[1].strip()
        if not source or not target:
            raise LexiconError(f"{path}:{lineno}: empty source or target")
        yield lineno, source, target


def read_lexicon_entries(path: Path) -> dict[str, list[str]]:
    """A bundle's lexicon file as source -> targets in file order, with `read_lexicon_file`'s checks and errors.

    This is start-up's largest cost (126,000 lines for the default model), so a file that `write_lexicon_file` could
    have written (no spaces around a tab or at a line's ends) is read in one tight loop with the cyclic collector
    paused: its 126,000 new lists would otherwise set off full passes over a growing heap. Any other file, or a line
    the loop cannot take, is read by `read_lexicon_file`."""
    text = _lexicon_text(path)
    if _tidy(text):
        entries: dict[str, list[str]] = {}
        collecting = gc.isenabled()
        gc.disable()
        try:
            for line in text.splitlines():
                source, tab, target = line.partition("\t")
                if not (source and target) or "\t" in target:
                    break
                found = entries.get(source)
                if found is None:
                    entries[source] = [target]
                else:
                    found.append(target)
            else:
                return entries
        finally:
            if collecting:
                gc.enable()
    entries = {}
    for _, source, target in _entries_of(path, text, comments=False):
        entries.setdefault(source, []).append(target)
    return entries


# what the tight loop leaves to `read_lexicon_file`: spaces around a tab or at a line's ends, blank lines, line ends
# other than "\n" and whitespace other than ASCII's (`str.strip` and `str.splitlines` read all of them otherwise)
_UNTIDY = (" \t", "\t ", " \n", "\n ", "\n\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")
_OTHER_SPACE = re.compile(r"[^\S\t\n ]")


def _tidy(text: str) -> bool:
    if any(mark in text for mark in _UNTIDY) or text[:1].isspace() or text.rstrip("\n")[-1:].isspace():
        return False
    return text.isascii() or _OTHER_SPACE.search(text) is None


def write_lexicon_file(path: Path, entries: Mapping[str, Sequence[str]]) -> None:
    """Write `entries` (source -> targets, best first) as TSV, gzip-compressed when the name ends
    in .gz. The gzip header holds no time or name, so the same entries give the same bytes (and hash)."""
    buf = io.StringIO()
    for source, targets in entries.items():
        for target in targets:
            if "\t" in source or "\t" in target or "\n" in source or "\n" in target:
                raise LexiconError(f"lexicon entry {source!r} -> {target!r} contains a tab or a newline")
            buf.write(f"{source}\t{target}\n")
    data = buf.getvalue().encode("utf-8")
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    path.write_bytes(data)


class Lexicon:
    """Source -> targets, best first; the bundle's entries with an operator's overrides on top.

    Build one with `Lexicon.load(bundle, override)`; look words up with `lookup`.
    """

    def __init__(
        self,
        entries: Mapping[str, Sequence[str]],
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        *,
        bundle_file: str | None = None,
        override_file: Path | None = None,
        overridden: int = 0,
        bundle_entries: Mapping[str, Sequence[str]] | None = None,
        one_word: bool = False,
        operator_sources: frozenset[str] = frozenset(),
    ):
        self._entries = dict(entries)  # its target lists are never changed: not copied (start-up time)
        self._operator = operator_sources  # the sources the operator's file gives (`from_operator`)
        # what `reloaded` starts again from: the bundle's entries before the operator's file, and how it reads sources
        self._bundle_entries = bundle_entries if bundle_entries is not None else {}
        self._one_word = one_word
        self._src = src_tokenizer
        self._tgt = tgt_tokenizer
        self.bundle_file = bundle_file
        self.override_file = override_file
        self.overridden = overridden  # sources the override file added or replaced
        # `lookup`'s answers by the source as asked: running text asks for the same words again and again, and each
        # answer costs a target encode and decode (a lexicon never changes: a reload makes a new one)
        self._found: dict[str, tuple[LexiconAnswer, ...]] = {}

    @classmethod
    def load(
        cls,
        bundle: LoadedBundle,
        override: str | Path | None = None,
        src_tokenizer: Tokenizer | None = None,
        tgt_tokenizer: Tokenizer | None = None,
    ) -> Lexicon | None:
        """The bundle's lexicon merged with the operator's `override` TSV; None when there is neither.

        The tokenizers default to the bundle's own (pass the engine's to share them).
        Raises LexiconError (one line, with the file and line number) on a bad override line.
        """
        if bundle.lexicon_path is None and override is None:
            return None
        src = src_tokenizer or Tokenizer.from_file(str(bundle.src_tokenizer_path))
        tgt = tgt_tokenizer or Tokenizer.from_file(str(bundle.tgt_tokenizer_path))
        entries: dict[str, Sequence[str]] = {}
        if bundle.lexicon_path is not None:
            entries = read_lexicon_entries(bundle.lexicon_path)
            if bundle.word_level_source:
                entries = served_first(entries, lambda target: _readable(tgt, target))
        overrides: dict[str, list[str]] = {}
        if override is not None:
            overrides = read_overrides(Path(override), src, tgt, one_word=bundle.word_level_source)
        return cls(
            {**entries, **overrides},
            src,
            tgt,
            bundle_file=bundle.meta["lexicon"]["file"] if bundle.lexicon_path is not None else None,
            override_file=Path(override) if override is not None else None,
            overridden=len(overrides),
            bundle_entries=entries,
            one_word=bundle.word_level_source,
            operator_sources=frozenset(overrides),
        )

    def reloaded(self) -> Lexicon:
        """A new lexicon: the bundle's entries with the operator's file read again (service/text/lexicon_watch.py).
        Raises LexiconError (one line) on a bad line or a missing file; this lexicon is unchanged either way."""
        if self.override_file is None:
            return self
        overrides = read_overrides(self.override_file, self._src, self._tgt, one_word=self._one_word)
        return Lexicon(
            {**self._bundle_entries, **overrides},
            self._src,
            self._tgt,
            bundle_file=self.bundle_file,
            override_file=self.override_file,
            overridden=len(overrides),
            bundle_entries=self._bundle_entries,
            one_word=self._one_word,
            operator_sources=frozenset(overrides),
        )

    def key(self, source: str) -> str:
        """`source` normalised as the source tokenizer normalises it (lower-cased for G2P)."""
        return _normalize(self._src, source)

    def lookup(self, source: str) -> list[LexiconAnswer]:
        """The targets listed for `source`, best first; [] when it is not in the lexicon."""
        found = self._found.get(source)
        if found is None:
            found = tuple(self._answer(target) for target in self._entries.get(self.key(source), ()))
            if len(self._found) >= LOOKUPS_KEPT:
                self._found.clear()
            self._found[source] = found
        return list(found)

    def _answer(self, target: str) -> LexiconAnswer:
        ids = self._tgt.encode(target, add_special_tokens=False).ids
        return LexiconAnswer(self._tgt.decode(ids, skip_special_tokens=True), tuple(ids))

    def from_operator(self, source: str) -> bool:
        """Whether the operator's file gives `source` its targets (so no rule of the reader fixes another reading)."""
        return self.key(source) in self._operator

    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and self.key(source) in self._entries

    def __len__(self) -> int:
        """Number of sources."""
        return len(self._entries)

    def info(self) -> dict:
        """What /info can show: where the entries came from and how many there are."""
        return {
            "bundle_file": self.bundle_file,
            "override_file": str(self.override_file) if self.override_file is not None else None,
            "sources": len(self._entries),
            "targets": sum(len(t) for t in self._entries.values()),
            "overridden_sources": self.overridden,
        }


def read_overrides(
    path: Path, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, one_word: bool = False
) -> dict[str, list[str]]:
    """An operator's TSV: normalised source -> its targets in file order, every line checked.

    A line is refused (LexiconError naming the file and line) when it is not `source<TAB>target`,
    when its source holds a character the source tokenizer cannot read (or, with `one_word`, a
    space: a word-level bundle looks up one word at a time), or when its target holds a token
    the target vocabulary lacks (a misspelt phoneme).
    """
    out: dict[str, list[str]] = {}
    unk = src_tokenizer.token_to_id("<unk>")
    tgt_unk = tgt_tokenizer.token_to_id("<unk>")
    for lineno, source, target in read_lexicon_file(path, comments=True):
        where = f"{path}:{lineno}"
        if one_word and any(c.isspace() for c in source):
            raise LexiconError(f"{where}: source {source!r} is more than one word; this model reads one word at a time")
        enc = src_tokenizer.encode(source, add_special_tokens=False)
        unknown = [source[a:b] for i, (a, b) in zip(enc.ids, enc.offsets) if i == unk]
        if unknown or not enc.ids:
            shown = ", ".join(repr(c) for c in dict.fromkeys(unknown)) or repr(source)
            raise LexiconError(f"{where}: source {source!r} holds text this model cannot read: {shown}")
        tgt = tgt_tokenizer.encode(target, add_special_tokens=False)
        missing = [target[a:b] for i, (a, b) in zip(tgt.ids, tgt.offsets) if i == tgt_unk]
        if missing or not tgt.ids:
            shown = ", ".join(repr(t) for t in dict.fromkeys(missing)) or repr(target)
            raise LexiconError(f"{where}: target {target!r} has token(s) not in the model's target vocabulary: {shown}")
        targets = out.setdefault(_normalize(src_tokenizer, source), [])
        if target not in targets:
            targets.append(target)
    return out


def _readable(tgt_tokenizer: Tokenizer, target: str) -> bool:
    """Whether every token of `target` is in the target vocabulary."""
    ids = tgt_tokenizer.encode(target, add_special_tokens=False).ids
    return bool(ids) and tgt_tokenizer.token_to_id("<unk>") not in ids


def _normalize(tok: Tokenizer, text: str) -> str:
    return tok.normalizer.normalize_str(text) if tok.normalizer is not None else text
