"""The context stage: a heteronym's pronunciation chosen from the sentence around it (numpy only).

Some words are spelt alike and read differently by meaning or part of speech ("I read it yesterday" /
"I will read it", "record a new record"). For each homograph a bundle's context component covers, a
per-homograph linear model (multinomial logistic regression over the words around it, their suffixes and
closed word classes, punctuation, capitalisation and position; the features of Gorman et al., LREC 2018) scores the
dictionary pronunciations it knows, and the best comes first. One more input of each homograph's model is a
shared verb-or-noun score, a logistic regression over the same features fitted on every homograph's sentences
at once: ~100 sentences of one word are too few to learn what "to X", "will X" or "the X" say in general.
Every other word is answered from the lexicon's first entry or the model, as without the component.

Files (named in `bundle.json` `context`, each listed in `files` with its sha256; see docs/ARCHITECTURE.md):
`context.json.gz`, gzip-compressed JSON:

    {"format": 1, "features": [name, ...],                # every feature name, once; weights index into it
     "shared": {"bias": b, "rows": [...], "weights": [w, ...]},  # optional: the verb-or-noun score
     "homographs": {word: {"classes": [ARPAbet, ...],      # the pronunciations it chooses among
                           "prior": [p, ...],             # each class's share of the training sentences
                           "bias": [b, ...],
                           "rows": [feature index, ...],   # the features with weights for this word
                           "weights": [[w per class], ...],
                           "shared": [w per class]}}}      # optional: its weights on the shared score

`context_features` is the one feature extractor: training (training/context.py) imports it, so what the
model was fitted on is what it sees when serving. A word alone (no other word in its input) gets the
most frequent class of the training sentences (`prior`), since nothing around it says otherwise.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CONTEXT_FILE = "context.json.gz"  # the file name `attnserve-export` gives a bundle's context component
FORMAT = 1

# words, numbers and single symbols: what the features see around a homograph
_TOKEN = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*|\d+|[^\w\s]", re.UNICODE)
_WINDOW = 5  # words either side that go into the bag of words
_SPAN = 200  # characters either side of a homograph scanned first for its features (`_left_tokens`)

# Closed word classes: what a neighbour says of a homograph's part of speech ("to X", "will X", "the X",
# "X of"), shared by every word of a class so a homograph with ~100 sentences learns it from all of them.
_CLASS_WORDS = {
    "DET": "a an the this that these those his her its their our my your some any no every each another either "
    "neither both all such whose which what",
    "PRON": "i you we they he she it who someone anyone everyone nobody people",
    "MOD": "will would can could shall should may might must cannot i'll you'll we'll they'll he'll she'll it'll "
    "i'd you'd we'd they'd he'd she'd won't wouldn't can't couldn't shouldn't mustn't",
    "TO": "to",
    "BE": "be is are was were been being am isn't aren't wasn't weren't it's he's she's that's there's",
    "HAVE": "has have had having hasn't haven't hadn't",
    "DO": "do does did don't doesn't didn't",
    "PREP": "of in on at for with by from into onto about over under between through during after before without "
    "within against among upon across toward towards via per like than as",
    "CONJ": "and or but nor",
    "ADV": "not also only just often never always still even then now already usually generally soon",
}
_CLASS = {w: c for c, words in _CLASS_WORDS.items() for w in words.split()}


class ContextError(ValueError):
    """A context component cannot be used; one line naming the file and what is wrong."""


def _shape(token: str) -> str:
    if token.isupper() and len(token) > 1:
        return "UPPER"
    if token[:1].isupper():
        return "Title"
    if token.isdigit():
        return "digit"
    if token.isalpha():
        return "lower"
    return "sym"


def _word_class(low: str, original: list[str]) -> str:
    """A neighbour's class: its closed class, else its shape and (for a lower-case word) its last two letters."""
    c = _CLASS.get(low)
    if c is not None:
        return c
    if not original:
        return low  # <s> or </s>
    shape = _shape(original[0])
    return f"{shape}:{low[-2:]}" if shape == "lower" else shape


def context_features(text: str, start: int, end: int) -> list[str]:
    """The features of the homograph at text[start:end] in its sentence: names such as "w-1=will", "w+1=it",
    "s-1=ll", "bag=yesterday", "shape=Title", "first". The same function fits the model (training) and applies
    it (serving)."""
    left = _left_tokens(text, start)
    right = _right_tokens(text, end)
    word = text[start:end]
    low_l = [t.lower() for t in left]
    low_r = [t.lower() for t in right]
    pad_l = ["<s>", "<s>", *low_l]
    pad_r = [*low_r, "</s>", "</s>"]
    p1, p2, n1, n2 = pad_l[-1], pad_l[-2], pad_r[0], pad_r[1]
    feats = [
        "bias",
        f"w-1={p1}",
        f"w-2={p2}",
        f"w+1={n1}",
        f"w+2={n2}",
        f"w-2,w-1={p2},{p1}",
        f"w+1,w+2={n1},{n2}",
        f"w-1,w+1={p1},{n1}",
        f"s-1={p1[-2:]}",
        f"s+1={n1[-2:]}",
        f"s3-1={p1[-3:]}",
        f"s3+1={n1[-3:]}",
        f"shape={_shape(word)}",
        f"shape-1={_shape(left[-1]) if left else '<s>'}",
        f"shape+1={_shape(right[0]) if right else '</s>'}",
    ]
    c1, c2, d1, d2 = (_word_class(t, low) for t, low in ((p1, left[-1:]), (p2, left[-2:-1]), (n1, right[:1]), (n2, right[1:2])))
    feats += [f"c-1={c1}", f"c-2,c-1={c2},{c1}", f"c+1={d1}", f"c+1,c+2={d1},{d2}", f"c-1,c+1={c1},{d1}"]
    if not left:
        feats.append("first")
    if not any(t[0].isalnum() for t in right):
        feats.append("last")
    words_l = [t for t in low_l if t[0].isalnum()][-_WINDOW:]
    words_r = [t for t in low_r if t[0].isalnum()][:_WINDOW]
    feats += [f"bag-={t}" for t in dict.fromkeys(words_l)]
    feats += [f"bag+={t}" for t in dict.fromkeys(words_r)]
    return feats


def _left_tokens(text: str, start: int) -> list[str]:
    """The tokens of text[:start], or enough of its last ones for every feature: the last two and the last _WINDOW
    words. A scan of the _SPAN characters before `start` gives them when it finds that many after its first two
    tokens (a scan that starts inside a token, at "'t" of "don't", is aligned again two tokens later), so a
    homograph's features cost the same in a long text as in a sentence."""
    lo = start - _SPAN
    if lo > 0:
        tokens = [m.group() for m in _TOKEN.finditer(text, lo, start)][2:]
        if len(tokens) >= 2 and sum(t[0].isalnum() for t in tokens) >= _WINDOW:
            return tokens
    return [m.group() for m in _TOKEN.finditer(text, 0, start)]


def _right_tokens(text: str, end: int) -> list[str]:
    """The tokens of text[end:], or enough of its first ones for every feature (as `_left_tokens`, the last two
    tokens of the scan dropped: the scan's end may cut one)."""
    hi = end + _SPAN
    if hi < len(text):
        tokens = [m.group() for m in _TOKEN.finditer(text, end, hi)][:-2]
        if len(tokens) >= 2 and sum(t[0].isalnum() for t in tokens) >= _WINDOW:
            return tokens
    return [m.group() for m in _TOKEN.finditer(text, end)]


def alone(text: str, start: int, end: int) -> bool:
    """Whether the word at text[start:end] is the only word of its input (punctuation aside)."""
    return not any(m.group()[0].isalnum() for m in _TOKEN.finditer(text[:start] + " " + text[end:]))


@dataclass(frozen=True)
class Choice:
    """The context stage's answer for one homograph: its classes (pronunciations) best first, with their
    probabilities, and whether the sentence decided it (False: the word stood alone and got the prior)."""

    ranked: list[tuple[str, float]]
    from_sentence: bool


class _Homograph:
    __slots__ = ("classes", "prior", "bias", "weights", "shared")

    def __init__(self, classes, prior, bias, weights: dict[str, np.ndarray], shared: list[float] | None):
        self.classes = classes
        self.prior = np.asarray(prior, dtype=np.float64)
        self.bias = np.asarray(bias, dtype=np.float64)
        self.weights = weights
        self.shared = None if shared is None else np.asarray(shared, dtype=np.float64)


class ContextChooser:
    """The context component of a bundle: `covers(word)` and `choose(word, text, start, end)`."""

    def __init__(self, homographs: dict[str, _Homograph], shared: tuple[float, dict] | None = None, file: str | None = None):
        self._homographs = homographs
        self._shared = shared  # (bias, feature -> weight) of the verb-or-noun score
        self.file = file

    @classmethod
    def from_data(cls, data: dict, file: str | None = None) -> ContextChooser:
        """From the decoded JSON of a context file (see the module's docstring). Raises ContextError."""
        where = file or "context"
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ContextError(f"{where}: not a context component of format {FORMAT}")
        names = data.get("features")
        homographs = {}
        try:
            for word, h in data["homographs"].items():
                k = len(h["classes"])
                w = np.asarray(h["weights"], dtype=np.float64).reshape(-1, k)
                rows = h["rows"]
                if len(rows) != len(w) or len(h["prior"]) != k or len(h["bias"]) != k or k < 1:
                    raise ValueError(f"homograph {word!r}: classes, prior, bias, rows and weights disagree")
                shared = h.get("shared")
                if shared is not None and (len(shared) != k or "shared" not in data):
                    raise ValueError(f"homograph {word!r}: its shared weights need one per class and a shared model")
                weights = {names[r]: w[j] for j, r in enumerate(rows)}
                homographs[word] = _Homograph(list(h["classes"]), h["prior"], h["bias"], weights, shared)
            shared_model = None
            if "shared" in data:
                m = data["shared"]
                if len(m["rows"]) != len(m["weights"]):
                    raise ValueError("shared model: rows and weights disagree")
                shared_model = (float(m["bias"]), {names[r]: float(v) for r, v in zip(m["rows"], m["weights"])})
        except (KeyError, TypeError, IndexError, ValueError) as e:
            raise ContextError(f"{where}: malformed context component ({e})") from None
        return cls(homographs, shared_model, file)

    @classmethod
    def load(cls, path: Path) -> ContextChooser:
        """Read a context file (gzip-compressed JSON). Raises ContextError naming the file."""
        try:
            data = json.loads(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError, ValueError) as e:
            raise ContextError(f"{path}: not a gzip-compressed JSON context file ({e})") from None
        return cls.from_data(data, path.name)

    @property
    def homographs(self) -> list[str]:
        return sorted(self._homographs)

    def covers(self, word: str) -> bool:
        """Whether `word` (lower-cased, as the lexicon's keys) is a homograph this component decides."""
        return word in self._homographs

    def choose(self, word: str, text: str, start: int, end: int) -> Choice:
        """The classes of `word` (a covered homograph) ranked for its occurrence at text[start:end],
        with their probabilities; a word alone in its input is ranked by the training sentences' shares."""
        h = self._homographs[word]
        if alone(text, start, end):
            p = h.prior
            from_sentence = False
        else:
            z = h.bias.copy()
            feats = context_features(text, start, end)
            for f in feats:
                w = h.weights.get(f)
                if w is not None:
                    z += w
            if h.shared is not None and self._shared is not None:
                bias, weights = self._shared
                z += (bias + sum(weights.get(f, 0.0) for f in feats)) * h.shared
            z -= z.max()
            p = np.exp(z)
            p /= p.sum()
            from_sentence = True
        # stable order: ties keep the classes' own order (the dictionary's)
        order = sorted(range(len(h.classes)), key=lambda i: -p[i])
        return Choice([(h.classes[i], float(p[i])) for i in order], from_sentence)

    def info(self) -> dict:
        """What /info can show."""
        return {"file": self.file, "homographs": len(self._homographs)}


class DeferredChooser:
    """A context component read on its first heteronym, not at start-up: `covers` and `info` answer from the
    homographs bundle.json lists (`context.homographs`), so a text with none never pays for the file (about 0.25 s
    and 40 MB at its peak for the default model's). The file read must cover exactly those: ContextError otherwise."""

    def __init__(self, path: Path, homographs: list[str]):
        self.path = path
        self.file = path.name
        self._listed = frozenset(homographs)
        self._chooser: ContextChooser | None = None
        self._lock = threading.Lock()  # requests of several threads: one reads the file, the others wait for it

    @property
    def homographs(self) -> list[str]:
        return sorted(self._listed)

    def covers(self, word: str) -> bool:
        return word in self._listed

    @property
    def read(self) -> bool:
        """Whether the file has been read (a heteronym came)."""
        return self._chooser is not None

    def loaded(self) -> ContextChooser:
        with self._lock:
            if self._chooser is None:
                chooser = ContextChooser.load(self.path)
                if set(chooser.homographs) != self._listed:
                    raise ContextError(f"{self.path}: its homographs are not the ones bundle.json lists")
                self._chooser = chooser
            return self._chooser

    def choose(self, word: str, text: str, start: int, end: int) -> Choice:
        return self.loaded().choose(word, text, start, end)

    def info(self) -> dict:
        return {"file": self.file, "homographs": len(self._listed)}


def context_chooser(path: Path, homographs: list[str] | None) -> ContextChooser | DeferredChooser:
    """The bundle's context component: deferred to its first heteronym where bundle.json lists the homographs it
    covers, else read now."""
    return DeferredChooser(path, homographs) if homographs else ContextChooser.load(path)


def rank_by_context(
    chooser: ContextChooser | DeferredChooser, word: str, found: list, text: str, start: int, end: int
) -> tuple[list, list | None]:
    """The lexicon's answers `found` (objects with `.text`) for a covered `word` at text[start:end], reordered
    by the chooser: those it scores first, most probable first, the rest after in the lexicon's order. Returns
    (reordered, [(text, probability)] of the scored ones), or (found, None) when it scores none of them (an
    operator's lexicon that lists other pronunciations keeps the last word)."""
    prob = dict(chooser.choose(word, text, start, end).ranked)
    scored = [a for a in found if a.text in prob]
    if not scored:
        return found, None
    scored.sort(key=lambda a: -prob[a.text])  # stable: ties keep the lexicon's order
    return scored + [a for a in found if a.text not in prob], [(a.text, prob[a.text]) for a in scored]
