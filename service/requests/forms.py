"""Output forms: a request's answer in ARPAbet or IPA, with or without stress (`parameters.alphabet`, `.stress`).

The engine and the lexicon answer in the model's own target tokens (ARPAbet with stress digits for G2P).
An `OutputForm` rewrites a unit's answer, its text and each of its tokens' texts, from its token ids:

- ARPAbet without stress: each phone without its digit, the tokens' texts as the model's are
  (the first phone bare, the others after a space): `AH T EH N SH AH N`;
- IPA (service/text/ipa.py): each phone's symbol, no spaces inside a word, the stress mark in front
  of the first phone of its syllable (`ə`, `ˈt`, `ɛ`, `n`, ...): `əˈtɛnʃən`.

Token ids, log-probabilities, the end token (text '') and word offsets stay as they are, so the tokens'
texts still concatenate to the text. Where a stress mark goes depends on the syllable's vowel, which comes
after its onset, so a stream in IPA with stress holds a word's tokens until the word has ended
(`FormStream`); the other forms stream token by token. The texts of `top_n_tokens` alternatives are
each phone alone in the form (no stress mark: an alternative has no syllable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from service.requests.units import Token
from service.text import ipa

ALPHABETS = ("arpabet", "ipa")


@dataclass(frozen=True)
class OutputForm:
    """How a request wants its answers written, and the target vocabulary's tokens (id -> phone)."""

    alphabet: str
    stress: bool
    vocab: Sequence[str]

    @property
    def incremental(self) -> bool:
        """Whether a token's text is known when the token is (False: it waits for its word's end)."""
        return not (self.alphabet == "ipa" and self.stress)

    def texts(self, ids: Sequence[int]) -> list[str]:
        """Each token's text, for one word's (non-special) token ids; they concatenate to `text(ids)`."""
        phones = [self.vocab[i] for i in ids]
        if self.alphabet == "ipa":
            return ipa.ipa_symbols(phones, self.stress)
        return [(" " if k else "") + (ipa.strip_stress(p) if ipa.is_arpabet(p) else "") for k, p in enumerate(phones)]

    def text(self, ids: Sequence[int]) -> str:
        return "".join(self.texts(ids))

    def alone(self, token_id: int, first: bool) -> str:
        """One token's text with nothing around it to place a mark by: a top_n_tokens alternative."""
        phone = self.vocab[token_id]
        if self.alphabet == "ipa":
            return ipa.phone_symbol(phone) if ipa.is_arpabet(phone) else ""
        return ("" if first else " ") + (phone if self.stress else ipa.strip_stress(phone))

    def tokens(self, tokens: list[Token]) -> list[Token]:
        """One word's tokens with their texts in this form (special tokens keep '')."""
        texts = iter(self.texts([t.id for t in tokens if not t.special]))
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
