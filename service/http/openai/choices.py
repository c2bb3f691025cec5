"""A completion's choices: each one's text as its tokens come, with OpenAI's stop rule (`ChoiceText`), the tokens it
shows (`TokenOut`), and the whole answers' choices of finished requests, with the skipped characters they report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnserve.service.http.responses import sentence_details, warnings, word_details
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.units import Token

FINISH = {"eos_token": "stop", "stop_sequence": "stop", "length": "length"}

# names the number of skipped spans of the prompts' characters (`warnings_headers`); docs/OPENAI.md
SKIPPED_HEADER = "x-attnserve-skipped-characters"


@dataclass
class TokenOut:
    """A token as a choice shows it: its text, where it starts in the choice's text, its raw log-probability
    (None for a lexicon answer's) and the step's most likely tokens [(text, logprob)] when asked for."""

    text: str
    offset: int
    logprob: float | None
    top: list[tuple[str, float]] | None


@dataclass
class ChoiceText:
    """A choice's text as its tokens come, with OpenAI's stop rule: the text ends before the first stop
    sequence. What may still begin one (the longest stop's length - 1 characters) is held back until the
    next token, so a stream never sends text it would then have to take back."""

    stop: tuple[str, ...]
    text: str = ""
    sent: int = 0
    pending: list[TokenOut] = field(default_factory=list)
    tokens: int = 0  # tokens read (end tokens included): the usage's completion tokens
    finish_reason: str | None = None

    def add(self, token: Token, top: list[Token] | None, finish: str | None) -> tuple[str, list[TokenOut], str | None]:
        """One token (the request layer's; `finish`: the TGI finish reason when it is the choice's last).
        Returns the text now released, its tokens, and the OpenAI finish reason once the choice has ended."""
        if self.finish_reason is not None:
            return "", [], None
        self.tokens += 1
        start = len(self.text)
        self.text += token.text
        if not token.special:
            self.pending.append(TokenOut(token.text, start, token.logprob, [(t.text, t.logprob) for t in top] if top else None))
        if not self.stop and (token.text or finish is not None):
            # no stop sequence: nothing is held back, so the text so far and its tokens go out now (what the rule below
            # gives without one; a stream's every token comes through here)
            end = len(self.text)
            delta, released, self.pending = self.text[self.sent :], self.pending, []
            self.sent = end
            if finish is not None:
                released = [t for t in released if t.offset < end]
                self.finish_reason = finish = FINISH.get(finish, "stop")
            return delta, released, finish
        cut = self._stop_at()
        if cut is not None:
            end, finish = cut, "stop"
            self.text = self.text[:cut]
        elif finish is not None:
            end, finish = len(self.text), FINISH.get(finish, "stop")
        else:
            end = len(self.text) - max(0, max((len(s) for s in self.stop), default=1) - 1)
        if finish is None and end <= self.sent:
            return "", [], None
        delta = self.text[self.sent : max(self.sent, end)]
        self.sent = max(self.sent, end)
        if finish is not None:
            released, self.pending = [t for t in self.pending if t.offset < end], []
        else:
            released = [t for t in self.pending if t.offset + len(t.text) <= end]
            self.pending = self.pending[len(released) :]
        self.finish_reason = finish
        return delta, released, finish

    def _stop_at(self) -> int | None:
        hits = [i for s in self.stop if (i := self.text.find(s, self.sent)) != -1]
        return min(hits) if hits else None


@dataclass
class Choice:
    index: int
    text: str
    tokens: list[TokenOut]
    finish_reason: str
    completion_tokens: int
    warnings: list[dict] | None = None  # its prompt's skipped characters (running text); None: nothing skipped
    words: list[dict] | None = None  # with `details`: its words, as /generate's details.words; None: not asked
    sentences: list[dict] | None = None  # with `details: "sentences"`, on a prompt's first choice: /generate's


def answered_choices(job: AdmittedRequest, k: int, base: int, stop: tuple[str, ...]) -> list[Choice]:
    """The first k answers of a finished request as choices base, base + 1, ... Running text (several units)
    has one answer: its words' best answers joined by the word separator."""
    words: list[list[dict] | None] = [None] * k
    if len(job.units) == 1:
        answers, top = job.answers(job.units[0])
        candidates = [(a.tokens, top if j == 0 else None, a.finish_reason) for j, a in enumerate(answers[:k])]
        if job.output.words_only and job.reader is not None:
            words = [[w.model_dump() for w in word_details(job, [[a]])] for a in answers[:k]]
    else:
        tokens, tops, finish = [], [], "eos_token"
        answered = [job.answers(u) for u in job.units]
        if job.output.words_only:
            words = [[w.model_dump() for w in word_details(job, [answers for answers, _ in answered])]]
        for i, (answers, top) in enumerate(answered):
            tokens += [job.separated(t, i, j) for j, t in enumerate(answers[0].tokens)]
            tops += top if top is not None else [None] * len(answers[0].tokens)
            finish = answers[0].finish_reason
        candidates = [(tokens, tops, finish)]
    out = []
    for j, (tokens, top, finish) in enumerate(candidates):
        text = ChoiceText(stop)
        shown: list[TokenOut] = []
        for t, (token, step_top) in enumerate(zip(tokens, top or [None] * len(tokens))):
            _, released, ended = text.add(token, step_top, finish if t == len(tokens) - 1 else None)
            shown += released
            if ended:
                break
        if text.finish_reason is None:  # no tokens at all
            text.finish_reason = FINISH.get(finish, "stop")
        out.append(Choice(base + j, text.text, shown, text.finish_reason, text.tokens, skipped_warnings(job), words[j]))
    if job.output.sentences and job.reader is not None and out:  # the best answer's, as /generate gives them
        out[0].sentences = [s.model_dump() for s in sentence_details(job)]
    return out


def skipped_warnings(job: AdmittedRequest) -> list[dict] | None:
    """The prompt's characters that running text skipped, as the TGI routes' `details.warnings`; None when none were."""
    return [w.model_dump() for w in warnings(job)] if job.skipped else None


def warnings_headers(jobs: list[list[AdmittedRequest]]) -> dict[str, str]:
    """`x-attnserve-skipped-characters`: how many spans of the prompts' characters were skipped (each prompt read
    once), known at admission, so a stream has it too; {} when none were. The spans themselves are each choice's
    `warnings` in a whole answer."""
    n = sum(len(row[0].skipped) for row in jobs if row)
    return {SKIPPED_HEADER: str(n)} if n else {}


def with_warnings(choice: dict, c: Choice) -> dict:
    """A choice object with the extension fields `words` when asked for (`details`) and `warnings` when its prompt had
    characters skipped (otherwise as OpenAI's, unchanged)."""
    if c.words is not None:
        choice["words"] = c.words
    if c.sentences is not None:
        choice["sentences"] = c.sentences
    if c.warnings:
        choice["warnings"] = c.warnings
    return choice
