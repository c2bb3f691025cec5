"""What a generation request is made of and answered with: its units (a word of running text, or the whole
input), their answers (the lexicon's or the model's), the stream's tokens, and the one rule of when the lexicon
answers (`lexicon_answers`), which admission (service/requests/frontend.py) and the OpenAI routes' count of the
slots a request needs both read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from attnserve.service.engine.engine import DecodingOptions, Engine, StepResult
from attnserve.service.engine.scheduler import Finished, Ticket
from attnserve.service.engine.stopping import Hypothesis, StoppingCriteria
from attnserve.service.requests.request import OutputOptions
from attnserve.service.text.options import ReadingOptions
from attnserve.service.text.reader import Word


class CaughtUp:
    """Yielded by a request's `stream_items` when it has given every token made so far: what follows waits for
    the engine, so a writer sends what it has gathered (several tokens' events in one write)."""


CAUGHT_UP = CaughtUp()


@dataclass(slots=True)  # not frozen: made per generated token, and a frozen dataclass's __init__ costs ~4x
class Token:
    """One token of an answer: its id, the text it adds to the answer (the difference of successive decodes), its
    raw log-probability (None for a lexicon answer's) and whether it is special (the end token, whose text is '').
    service/http/ writes it as TGI's Token object (or OpenAI's); in process it reads as one too (`t["text"]`)."""

    id: int
    text: str
    logprob: float | None
    special: bool

    def __getitem__(self, name: str) -> object:
        return getattr(self, name)

    def with_text(self, text: str) -> Token:
        return Token(self.id, text, self.logprob, self.special)


def step_token(r: StepResult) -> Token:
    """A streamed token."""
    return Token(r.token_id, r.text, r.logprob, r.special)


def top_tokens(engine: Engine, top: list[tuple[int, float]] | None, prefix: Sequence[int] = ()) -> list[Token] | None:
    """A step's most likely tokens. Each one's text follows the rule of a generated token's: the text it adds to the
    output after `prefix` (the ids chosen before this step), the difference of successive decodes; so the chosen
    token's entry has the generated token's text (" IH1" after a first phoneme, not "IH1")."""
    if top is None:
        return None
    before = engine.decode_ids(prefix)
    out = []
    for i, lp in top:
        special = i in engine.special_token_ids
        text = "" if special else engine.decode_ids([*prefix, i])[len(before) :]
        out.append(Token(i, text, lp, special))
    return out


def hypothesis_tokens(engine: Engine, h: Hypothesis) -> list[Token]:
    """A finished hypothesis' tokens: each token's text is the difference of successive decodes (so they
    concatenate to the text), the end token last with text ''."""
    out, prev = [], ""
    last = len(h.token_ids) - 1
    for k, (tok, lp) in enumerate(zip(h.token_ids, h.logprobs or [None] * len(h.token_ids))):
        text = engine.decode_ids(h.token_ids[: k + 1])
        if text.endswith("\ufffd") and k < last:
            # a byte-level token that ends inside a character: its text waits for the token that completes it, so the
            # texts still concatenate to the answer's (a later decode turns that U+FFFD into the character)
            out.append(Token(tok, "", lp, tok in engine.marked_special))
            continue
        out.append(Token(tok, text[len(prev) :], lp, tok in engine.marked_special))  # an imported model's <s>, say
        prev = text
    if h.finish_reason == "eos_token":
        out.append(Token(engine.eos_id, "", h.eos_logprob, True))
    return out


@dataclass
class Answer:
    """One answer of a unit: its text, its tokens (the end token last when it ended), and where it came from. Not
    changed once handed out: the lexicon's answers are shared by every occurrence of their word (a heteronym's, made
    per occurrence, are given their source and candidates before)."""

    text: str
    tokens: list[Token]
    finish_reason: str
    generated_tokens: int
    score: float | None
    source: str  # "model", "lexicon", "parts", "punctuation" (a mark kept between words) or "context" (a lexicon answer
    # the sentence chose: service/text/context.py)
    index: int | None = None  # which sampled candidate it was (best_of with sampling)
    seed: int | None = None
    candidates: list[tuple[str, float]] | None = None  # "context": the pronunciations it chose among, with probabilities
    guessed: bool = False  # a model answer scored below the bundle's guess threshold (Bundle.guess_threshold)

    @property
    def token_ids(self) -> list[int]:
        return [t.id for t in self.tokens if not t.special]


@dataclass(eq=False)
class Unit:
    """What one answer is asked for: a word of running text, or the whole input."""

    text: str  # what is looked up and encoded: the word as read, or the input
    word: Word | None  # word-level bundles: the word, its span in the request's `inputs`
    source_ids: list[int]
    known: list[Answer]  # the lexicon's answers, best first (at most n_best); [] when it does not answer
    ticket: Ticket | None = None  # the engine's, when the model answers (or fills best_of)
    results: list[StepResult] = field(default_factory=list)
    finished: Finished | None = None
    parts: list[str] | None = None  # a word longer than the model reads: its parts (service/requests/parts.py)
    given: tuple[str, str] | None = None  # a request's pronunciation of it as written, and its alphabet (overrides.py)


@dataclass(slots=True)  # one per streamed token: a frozen dataclass's __init__ sets each field through object.__setattr__
class StreamToken:
    """One token of a stream, in text order; `last`: the text's last token; `word`: the index of the unit (the word of
    `details.words`) this token completes, None when it completes none."""

    token: Token
    top_tokens: list[Token] | None
    finish_reason: str | None
    last: bool
    word: int | None = None


def lexicon_answers(reading: ReadingOptions, output: OutputOptions, options: DecodingOptions) -> bool:
    """Whether the lexicon may answer this request (service/requests/frontend.py's docstring): the model's own
    distribution or prefill asked for goes to the model."""
    return reading.lexicon and not options.sampling and not options.top_n_tokens and not output.decoder_input_details


def lexicon_answer(engine: Engine, ids: tuple[int, ...], max_new_tokens: int, stop: tuple[str, ...] = ()) -> Answer:
    """A lexicon entry as an answer: its target ids with logprob null and the end token, cut at max_new_tokens,
    or after the first stop sequence it completes, token by token as the model's answer would be
    (the shared StoppingCriteria: the stop sequence is kept, the finish reason is `stop_sequence`)."""
    cut = len(ids) > max_new_tokens
    h = Hypothesis(list(ids[:max_new_tokens]), [], "length" if cut else "eos_token")
    if stop:
        stopping, old = StoppingCriteria(max_new_tokens, tuple(stop)), ""
        for k in range(1, len(h.token_ids) + 1):
            new = engine.decode_ids(h.token_ids[:k])
            if stopping(k, old, new) == (True, "stop_sequence"):
                h.token_ids, h.finish_reason = h.token_ids[:k], "stop_sequence"
                break
            old = new
    h.text = engine.decode_ids(h.token_ids)
    return Answer(h.text, hypothesis_tokens(engine, h), h.finish_reason, h.generated_tokens, None, "lexicon")


def is_mark(u: Unit) -> bool:
    """Whether a unit is a mark of punctuation kept between words (`punctuation: true`): answered by itself."""
    return u.word is not None and u.word.punctuation
