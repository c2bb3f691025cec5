"""The phonemizer library: running text in, sentences of words and phonemes out, for a TTS voice (Piper's by default).

    import attnserve
    for s in attnserve.phonemize("Dr. Smith arrived at 5 p.m. He paid $5."):
        s.text, s.start, s.end, s.phonemes     # 'Dr. Smith arrived at 5 p.m.', 0, 27, 'dˈɑːktɚ smˈɪθ ... pˌiːˈɛm.'
        [(w.text, w.start, w.end, w.phonemes, w.source) for w in s.words]
    with attnserve.Phonemizer() as p:          # the model loaded once, for repeated calls and for threads
        for s in p.phonemize_stream(llm_tokens): ...   # each sentence once it is complete, the last at the end
    attnserve.to_piper_ids(s, voice_config["phoneme_id_map"])

It is the in-process `Generator` (service/client.py) and the request layer every front end shares: the text is cut into
sentences (service/text/sentences.py), each sentence is read as one input of `Generator.generate_text_many`, all of
them in one batch. Keywords left None take the request layer's defaults (punctuation: on for alphabet "espeak").
`language` other than en-us is a ValueError; so is any option the HTTP routes would refuse (the same validator).
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnserve.service.client import Generator, InputError, TextResult
from attnserve.service.engine.bundle import PACKAGED_BUNDLE
from attnserve.service.errors import InvalidRequest
from attnserve.service.text.language import check_language
from attnserve.service.text.options import PUNCTUATION_ON
from attnserve.service.text.sentences import sentence_spans

# Piper's phoneme ids: a sentence starts with BOS, ends with EOS, and PAD follows BOS and every phoneme
PIPER_BOS, PIPER_EOS, PIPER_PAD = "^", "$", "_"
_CLOSERS = "\"'”’)]»"


@dataclass(frozen=True)
class Word:
    """A word as read (`text`: "doctor" for "Dr.", "five" and "dollars" for "$5"), its span of the whole input
    (`input[start:end]`, shared by the words one written form reads as), its phonemes, where they came from
    ("lexicon", "model", "context", "parts", "fallback" (`phonemize`'s), or "punctuation" for a kept mark), the
    model's score (None unless "model"), and `guessed`: a model answer scored below the bundle's guess threshold, a
    likely wrong reading."""

    text: str
    start: int
    end: int
    phonemes: str
    source: str
    score: float | None
    guessed: bool = False


@dataclass(frozen=True)
class Sentence:
    """One sentence: its text (`input[start:end]`), its phonemes as one string (alphabet "espeak": as Piper's
    espeak-ng writes a sentence, words and marks joined as it joins them) and its words, marks included."""

    text: str
    start: int
    end: int
    phonemes: str
    words: tuple[Word, ...]


class Phonemizer:
    """A loaded model (`bundle`: a bundle directory; None: the default model installed with the package) and its
    running batch; `phonemize` and `phonemize_stream` may be called from several threads at once. The other
    keywords are `Generator`'s (threads: ONNX Runtime's intra-op threads, default the CPUs this process may use)."""

    def __init__(
        self,
        bundle: str | Path | None = None,
        *,
        threads: int | None = None,
        variant: str = "auto",
        provider: str = "auto",
        lexicon_file: str | Path | None = None,
        max_batch_size: int = 32,
    ):
        self.generator = Generator(
            PACKAGED_BUNDLE if bundle is None else bundle,
            threads=threads,
            variant=variant,
            provider=provider,
            lexicon_file=lexicon_file,
            max_batch_size=max_batch_size,
        )
        self._checked: set[tuple] = set()  # option sets `_options` has checked (without pronunciations, which vary)

    def close(self) -> None:
        self.generator.close()

    def __enter__(self) -> Phonemizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def phonemize(
        self,
        text: str,
        *,
        alphabet: str = "espeak",
        punctuation: bool | None = None,
        stress: bool = True,
        pronunciations: Mapping[str, str] | None = None,
        pronunciations_alphabet: str | None = None,
        date_order: str | None = None,
        number_and: bool | None = None,
        language: str | None = None,
        context: bool | None = None,
        lexicon: bool = True,
        fallback: Callable[[str], str | None] | None = None,
    ) -> list[Sentence]:
        """`text`'s sentences in order. `alphabet` "espeak" (espeak-ng's en-us IPA, every symbol in Piper's phoneme
        map), "ipa" or "arpabet"; `punctuation` keeps the marks a voice pauses on (default: on for "espeak");
        `stress` False drops stress marks; `pronunciations` {word or words: phonemes} for this call; `date_order`
        "mdy" (default), "dmy" or "ymd"; `number_and` True reads numbers with the British "and" (one hundred and
        five); `context` False reads a heteronym as the lexicon's first entry; `lexicon` False asks the model for
        every word. `fallback`: called with each word the model guessed (`Word.guessed`) as read ("kubernetes"), it
        returns that word's phonemes in the call's alphabet (espeak-ng's, say), or None to keep the model's; the word's
        source is then "fallback". ValueError for a bad option, a language other than en-us, or a
        sentence the reader cannot take (longer than its limit)."""
        options = self._options(locals())
        spans, _ = sentence_spans(text, final=True)
        return self._read(text, spans, 0, options, fallback)

    def phonemize_stream(
        self,
        chunks: Iterable[str],
        *,
        alphabet: str = "espeak",
        punctuation: bool | None = None,
        stress: bool = True,
        pronunciations: Mapping[str, str] | None = None,
        pronunciations_alphabet: str | None = None,
        date_order: str | None = None,
        number_and: bool | None = None,
        language: str | None = None,
        context: bool | None = None,
        lexicon: bool = True,
        fallback: Callable[[str], str | None] | None = None,
    ) -> Iterator[Sentence]:
        """The sentences of the text `chunks` make together, each yielded once, as soon as the text that decides its
        end has arrived (the word after it), the last at the end of the input: the same sentences, offsets included,
        as `phonemize` gives for the whole text. Options as `phonemize`'s, checked by this call (ValueError), before
        any chunk is read."""
        return self._stream(chunks, self._options(locals()), fallback)

    def _stream(self, chunks: Iterable[str], options: dict, fallback=None) -> Iterator[Sentence]:
        pending, offset = "", 0  # the text not yet cut into sentences, and where it starts in the whole input
        for chunk in chunks:
            pending += chunk
            spans, settled = sentence_spans(pending, final=False)
            if spans:
                yield from self._read(pending, spans, offset, options, fallback)
            pending, offset = pending[settled:], offset + settled
        spans, _ = sentence_spans(pending, final=True)
        yield from self._read(pending, spans, offset, options, fallback)

    def _options(self, asked: dict) -> dict:
        """`generate_text_many`'s keywords of a call's, checked now (ValueError): None means the default."""
        try:
            check_language(asked["language"])
        except InvalidRequest as e:
            raise ValueError(str(e)) from None
        names = ("alphabet", "punctuation", "stress", "pronunciations", "pronunciations_alphabet", "date_order", "number_and")
        options = {k: asked[k] for k in (*names, "context", "lexicon") if asked[k] is not None}
        options["logprobs"] = True  # a model word's score: its tokens' log-probabilities
        key = tuple(sorted(options.items())) if "pronunciations" not in options else None
        if key is None or key not in self._checked:
            list(self.generator.generate_text_many([], **options))  # the options' checks, before any text is read
            if key is not None and len(self._checked) < 64:
                self._checked.add(key)
        return options

    def _read(self, text: str, spans: Sequence[tuple[int, int]], offset: int, options: dict, fallback=None) -> list[Sentence]:
        """The sentences text[start:end] for `spans`, read together, their offsets moved by `offset`; `fallback` as
        `phonemize` takes it."""
        lines = [text[a:b] for a, b in spans]
        out = []
        for line, (a, b), result in zip(lines, spans, self.generator.generate_text_many(lines, **options)):
            if isinstance(result, InputError):
                raise ValueError(f"sentence at {offset + a}: {result}")
            phonemes, words = _words(result, offset + a)
            if fallback is not None and any(w.guessed for w in words):
                phonemes, words = _fall_back(result, words, fallback)
            if self._keeps_marks(options) and _ends_in_taken_stop(line, words):
                # an abbreviation took the sentence's full stop ("5 p.m."): the sentence still ends with one
                at = offset + a + len(line.rstrip(_CLOSERS)) - 1
                words.append(Word(".", at, at + 1, ".", "punctuation", None))
                phonemes += "." if result.joints is not None else result.separator + "."
            out.append(Sentence(line, offset + a, offset + b, phonemes, tuple(words)))
        return out

    def _keeps_marks(self, options: dict) -> bool:
        asked = options.get("punctuation")
        return asked if asked is not None else options.get("alphabet", "espeak") in PUNCTUATION_ON


def _words(result: TextResult, offset: int) -> tuple[str, list[Word]]:
    words = [
        Word(w, offset + s, offset + e, a[0].text, a[0].source, a[0].score, a[0].guessed)
        for w, (s, e), a in zip(result.words, result.spans, result.answers)
    ]
    return result.text, words


def _fall_back(result: TextResult, words: list[Word], fallback: Callable[[str], str | None]) -> tuple[str, list[Word]]:
    """The sentence's phonemes and words with each guessed word's phonemes from `fallback` where it gives some."""
    out = []
    for w in words:
        given = fallback(w.text) if w.guessed else None
        if given is not None and not isinstance(given, str):
            raise TypeError(f"fallback({w.text!r}) returned {type(given).__name__}; phonemes are a str (or None)")
        out.append(w if given is None else dataclasses.replace(w, phonemes=given, source="fallback"))
    return result.join([w.phonemes for w in out]), out


def _ends_in_taken_stop(line: str, words: list[Word]) -> bool:
    return line.rstrip(_CLOSERS).endswith(".") and bool(words) and words[-1].source != "punctuation"


def to_piper_ids(sentence: Sentence | str, phoneme_id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """A sentence's phonemes (alphabet "espeak") as a Piper voice's input ids, as piper-phonemize makes them: BOS, PAD,
    then each phoneme (a code point) followed by PAD, then EOS. `phoneme_id_map` is the voice's config.json
    `phoneme_id_map`; a phoneme it lacks is a ValueError naming it."""
    phonemes = sentence.phonemes if isinstance(sentence, Sentence) else sentence
    try:
        ids = [*phoneme_id_map[PIPER_BOS], *phoneme_id_map[PIPER_PAD]]
        for ph in phonemes:
            ids += [*phoneme_id_map[ph], *phoneme_id_map[PIPER_PAD]]
        return ids + [*phoneme_id_map[PIPER_EOS]]
    except KeyError as e:
        raise ValueError(f"phoneme {e.args[0]!r} is not in the voice's phoneme_id_map") from None


_default: Phonemizer | None = None
_default_lock = threading.Lock()


def default_phonemizer() -> Phonemizer:
    """The process's shared Phonemizer of the default model, loaded on first use (closed at exit)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Phonemizer()
            atexit.register(_default.close)
        return _default


def phonemize(text: str, **options) -> list[Sentence]:
    """`Phonemizer.phonemize` on the default model, loaded once per process (`default_phonemizer`)."""
    return default_phonemizer().phonemize(text, **options)


def phonemize_stream(chunks: Iterable[str], **options) -> Iterator[Sentence]:
    """`Phonemizer.phonemize_stream` on the default model, loaded once per process (`default_phonemizer`)."""
    return default_phonemizer().phonemize_stream(chunks, **options)
