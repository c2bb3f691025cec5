"""Output forms: a request's answer in ARPAbet, IPA or espeak-ng's IPA, with or without stress (`parameters.alphabet`,
`.stress`).

The engine and the lexicon answer in the model's own target tokens (ARPAbet with stress digits for G2P).
An `OutputForm` rewrites a unit's answer, its text and each of its tokens' texts, from its token ids:

- ARPAbet without stress: each phone without its digit, the tokens' texts as the model's are
  (the first phone bare, the others after a space): `AH T EH N SH AH N`;
- IPA (service/text/ipa.py): each phone's symbol, no spaces inside a word, the stress mark in front
  of the first phone of its syllable (`ə`, `ˈt`, `ɛ`, `n`, ...): `əˈtɛnʃən`;
- espeak (service/text/espeak.py): espeak-ng's en-us IPA, what Piper's voices read: the stress mark on the vowel's
  text, length marks, flaps (`ɐ`, `t`, `ˈɛ`, `n`, `ʃ`, `ə`, `n`: `ɐtˈɛnʃən`). A function word of running text takes
  its weak form as a whole (`weak`, decided by the word's neighbours: `EspeakText`), written on its first token; words
  are joined by a space and a kept mark is written against the word before it, as Piper's phonemizer joins them.

Token ids, log-probabilities, the end token (text '') and word offsets stay as they are, so the tokens'
texts still concatenate to the text. Where a stress mark goes depends on the syllable's vowel, which comes
after its onset, and espeak's flaps and reduced vowels on the phones after them, so a stream in IPA with stress, or
in espeak, holds a word's tokens until the word has ended (`FormStream`); the other forms stream token by token.
The texts of `top_n_tokens` alternatives are each phone alone in the form (no stress mark: an alternative has no
syllable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from attnserve.service.requests.units import Token, Unit
from attnserve.service.text import espeak, ipa

ALPHABETS = ("arpabet", "ipa", "espeak")
WORD_CACHE = 1 << 17  # words an espeak form remembers


@dataclass(frozen=True)
class OutputForm:
    """How a request wants its answers written, and the target vocabulary's tokens (id -> phone)."""

    alphabet: str
    stress: bool
    vocab: Sequence[str]
    # espeak: a word's text by its token ids or its answer's text (`spoken`), so a word already seen is one dict
    # lookup; at most WORD_CACHE of them
    _words: dict[tuple[int, ...] | str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def incremental(self) -> bool:
        """Whether a token's text is known when the token is (False: it waits for its word's end)."""
        return self.alphabet == "arpabet" or (self.alphabet == "ipa" and not self.stress)

    def texts(self, ids: Sequence[int], weak: str | None = None, link: bool = False) -> list[str]:
        """Each token's text, for one word's (non-special) token ids; they concatenate to `text(ids)`. `weak`: the
        word's whole text instead (espeak's weak form of a function word), on its first token; `link`: espeak's
        linking r after a final ER before a vowel ("number of" nˈʌmbɚɹ ʌv), on its last token."""
        if weak is not None and ids:
            return [weak] + [""] * (len(ids) - 1)
        phones = [self.vocab[i] for i in ids]
        if self.alphabet == "espeak":
            texts = list(espeak.word_texts(tuple(phones), self.stress))
            if link and texts:
                texts[-1] += "ɹ"
            return texts
        if self.alphabet == "ipa":
            return ipa.ipa_symbols(phones, self.stress)
        return [(" " if k else "") + (ipa.strip_stress(p) if ipa.is_arpabet(p) else "") for k, p in enumerate(phones)]

    def text(self, ids: Sequence[int], weak: str | None = None, link: bool = False) -> str:
        if weak is not None and ids:
            return weak
        if self.alphabet != "espeak":
            return "".join(self.texts(ids))
        key = tuple(ids)
        text = self._words.get(key)
        if text is None:
            text = "".join(self.texts(key))
            if len(self._words) < WORD_CACHE:
                self._words[key] = text
        return text + "ɹ" if link and text else text

    def spoken(self, answer: str, weak: str | None = None, link: bool = False) -> str:
        """espeak: a word's text from its answer in the model's own text ("AH0 T EH1 N SH AH0 N"; its tokens' texts
        joined by spaces), memoised on that string: generated_text without building the token ids."""
        if weak is not None:
            return weak
        text = self._words.get(answer)
        if text is None:
            text = "".join(espeak.word_texts(tuple(answer.split()), self.stress))
            if len(self._words) < WORD_CACHE:
                self._words[answer] = text
        return text + "ɹ" if link and text else text

    def alone(self, token_id: int, first: bool) -> str:
        """One token's text with nothing around it to place a mark by: a top_n_tokens alternative."""
        phone = self.vocab[token_id]
        if self.alphabet == "espeak":
            return espeak.phone_symbol(phone) if ipa.is_arpabet(phone) else ""
        if self.alphabet == "ipa":
            return ipa.phone_symbol(phone) if ipa.is_arpabet(phone) else ""
        return ("" if first else " ") + (phone if self.stress else ipa.strip_stress(phone))

    def tokens(self, tokens: list[Token], weak: str | None = None, link: bool = False) -> list[Token]:
        """One word's tokens with their texts in this form (special tokens keep ''); `weak`, `link` as in `texts`."""
        texts = iter(self.texts([t.id for t in tokens if not t.special], weak, link))
        return [t if t.special else t.with_text(next(texts)) for t in tokens]

    def top(self, steps: list[list[Token]] | None, offset: int = 0) -> list[list[Token]] | None:
        """top_n_tokens alternatives per step (steps `offset`, `offset + 1`, ... of a word), texts in this form."""
        if steps is None:
            return None
        return [None if step is None else self.alternatives(step, offset + k) for k, step in enumerate(steps)]

    def alternatives(self, step: list[Token], position: int) -> list[Token]:
        return [t if t.special else t.with_text(self.alone(t.id, position == 0)) for t in step]


class FormUnsupported(ValueError):
    """The model's target vocabulary is not ARPAbet, so it has no other form."""


def output_form(alphabet: str, stress: bool, tgt_tokenizer: Tokenizer, special_ids: set[int]) -> OutputForm | None:
    """The form a request asks for; None for the model's own (ARPAbet with stress). Raises FormUnsupported when the
    model's tokens are not ARPAbet phones, ValueError for an unknown alphabet."""
    if alphabet not in ALPHABETS:
        raise ValueError(f"alphabet must be one of {', '.join(ALPHABETS)}, got {alphabet!r}")
    if alphabet == "arpabet" and stress:
        return None
    vocab = [tgt_tokenizer.id_to_token(i) or "" for i in range(tgt_tokenizer.get_vocab_size())]
    foreign = [p for i, p in enumerate(vocab) if i not in special_ids and not ipa.is_arpabet(p)]
    if foreign:
        raise FormUnsupported(
            f"this model does not answer in ARPAbet (its vocabulary has {foreign[0]!r}), so it has no other alphabet or "
            "stress form: leave alphabet and stress unset"
        )
    return OutputForm(alphabet, stress, tuple(vocab))


Pending = tuple[Token, list[Token] | None, str | None]  # a token, its step's alternatives, its finish reason


class FormStream:
    """One word's streamed tokens in a form: `push` gives back the tokens that can be sent now, their texts
    rewritten (all at once at the word's end when the form waits for it)."""

    def __init__(self, form: OutputForm):
        self.form = form
        self.held: list[Pending] = []
        self.sent = 0  # the word's (non-special) tokens sent so far

    def push(self, token: Token, top: list[Token] | None, finish: str | None) -> list[Pending]:
        self.held.append((token, top, finish))
        if not self.form.incremental and finish is None:
            return []
        if self.form.incremental:
            (token, top, finish), self.held = self.held[0], []
            if token.special:
                return [(token, self.alternatives(top), finish)]
            text = self.form.alone(token.id, self.sent == 0)
            out = [(token.with_text(text), self.alternatives(top), finish)]
            self.sent += 1
            return out
        tokens = self.form.tokens([t for t, _, _ in self.held])
        out = []
        for t, (_, step, reason) in zip(tokens, self.held):
            out.append((t, self.alternatives(step), reason))
            self.sent += not t.special
        self.held = []
        return out

    def alternatives(self, step: list[Token] | None) -> list[Token] | None:
        return None if step is None else self.form.alternatives(step, self.sent)


ENDS_IN_ER = ("ER0", "ER1", "ER2", "ER")  # an answer, in the model's own text, whose last phone is ER
PAUSES = frozenset(".,;:!?\u2014\u2013\u2026")  # between two words, these end a phrase (espeak's "final" forms)


class EspeakText:
    """Running text in espeak's form, as Piper's phonemizer joins it: what goes before each unit (a space before a word,
    nothing before a mark of punctuation, which Piper writes against the word before it), each kept mark as Piper
    writes it (service/text/espeak.py `mark_text`), and each function word's weak form by its neighbours.

    `units` are a request's units in text order; `pinned`: the units whose answer the request itself gave
    (`pronunciations`), which keep it. A weak form replaces a lexicon answer only (a model's answer, asked for with
    `lexicon: false`, is the model's). Its position: `alone` when it is the text's only word, `final` before a pause
    (a kept mark, or a pause mark between it and the next word) or at the end, else `vowel` or `consonant` by the
    next word's first sound: its lexicon answer's first phone, or its first letter when the model answers it. Another
    lexicon answer that ends in ER before a vowel takes a linking r, as espeak-ng writes it (`linked`)."""

    def __init__(self, form: OutputForm, inputs: str, units: list[Unit], pinned: frozenset[int] = frozenset()):
        self.weak: dict[int, str] = {}  # unit index -> its best answer's text
        self.linked: set[int] = set()  # unit indices whose best answer ends with a linking r
        self.marks: dict[int, str] = {}  # unit index (a kept mark) -> its text
        self.joints: list[str] = []  # unit index -> the text before it
        alone = sum(1 for u in units if u.word is None or not u.word.punctuation) == 1
        table = espeak.function_words()
        written = False
        for k, u in enumerate(units):
            if u.word is not None and u.word.punctuation:
                mark = self.marks[k] = espeak.mark_text(inputs[u.word.start : u.word.end])  # a dash is '-' in u.text
                self.joints.append("")
                written = written or bool(mark)
                continue
            self.joints.append(" " if written else "")
            written = True
            if k in pinned or not u.known or u.known[0].source not in ("lexicon", "context"):
                continue
            forms = table.get(u.text.lower())
            if forms is None and not u.known[0].text.endswith(ENDS_IN_ER):
                continue  # most words: neither a function word nor one to link
            position = "alone" if alone else self._position(inputs, units, k)
            if forms is not None:
                self.weak[k] = forms.at(position) if form.stress else espeak.unstressed(forms.at(position))
            elif position == "vowel":
                self.linked.add(k)

    @staticmethod
    def _position(inputs: str, units: list[Unit], k: int) -> str:
        if k + 1 == len(units):
            return "final"
        u, nxt = units[k], units[k + 1]
        if nxt.word is None or nxt.word.punctuation:
            return "final"
        between = inputs[u.word.end : nxt.word.start]
        if between != " " and PAUSES.intersection(between):
            return "final"
        if nxt.known and nxt.known[0].text:
            first = nxt.known[0].text.split(" ", 1)[0]  # its answer's first phone, in the model's own text
            return "vowel" if ipa.is_vowel(first) else "consonant"
        return "vowel" if nxt.text[:1].lower() in "aeiou" else "consonant"

    def join(self, texts: Sequence[str]) -> str:
        """generated_text for the units' texts (in this form), in order."""
        return "".join(j + t for j, t in zip(self.joints, texts))
