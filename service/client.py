"""The in-process Python API: the server's engine and continuous batching, without HTTP.

    from service import Generator
    with Generator("models/g2p-en") as g:
        g.generate("attention").text                   # 'AH0 T EH1 N SH AH0 N' (the model alone)
        [r.text for r in g.generate_many(words)]       # batched, in input order
        for token in g.stream("attention"): ...        # engine StepResults as they come
        [r.text for r in g.generate_text_many(lines)]  # as the server answers: lexicon first, running text

`generate_text_many` answers as the HTTP API does (service/text/requests.py): a word-level
bundle reads running text word by word, the lexicon answers greedy and beam-search requests
for the words it knows, and the model the others, all in one batch.

Calls may come from several threads at once: they share one running batch,
exactly as concurrent HTTP requests do.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from service.engine.bundle import load_bundle
from service.engine.decoding import Hypothesis
from service.engine.engine import DecodingOptions, Engine, GenerationResult, InputError, StepResult
from service.engine.scheduler import Failed, Finished, Scheduler, Ticket
from service.metrics import ServiceMetrics
from service.text.lexicon import Lexicon
from service.text.reader import WORD_SEPARATOR, TextError, TextReader


class GenerationError(RuntimeError):
    """A request the scheduler ended with an error (timeout, shutdown, engine failure)."""


@dataclass(frozen=True)
class TextAnswer:
    """One answer for a word (or a whole input): its text, the model's score (None from the lexicon), its source."""

    text: str
    score: float | None
    source: str  # "model" or "lexicon"; "mixed" for a line whose words came from both


@dataclass
class TextResult:
    """The answer of one input line: each unit's answers, best first (a unit is a word of running
    text for a word-level bundle, else the whole line), and the separator that joins words."""

    words: list[str]
    answers: list[list[TextAnswer]]
    separator: str = WORD_SEPARATOR

    @property
    def text(self) -> str:
        return self.separator.join(a[0].text for a in self.answers)

    def ranked(self) -> list[TextAnswer]:
        """The line's n-best: rank k joins every word's k-th answer (a word with fewer keeps its last);
        its score is the mean of the words' scores (None when a lexicon answer is among them)."""
        out = []
        for k in range(max(len(a) for a in self.answers)):
            picked = [a[min(k, len(a) - 1)] for a in self.answers]
            scores = [p.score for p in picked]
            sources = {p.source for p in picked}
            out.append(
                TextAnswer(
                    self.separator.join(p.text for p in picked),
                    float(np.mean(scores)) if None not in scores else None,
                    sources.pop() if len(sources) == 1 else "mixed",
                )
            )
        return out


class Generator:
    """Load a bundle once; generate with the server's scheduler. Keyword parameters of the
    generate methods are `DecodingOptions` fields (max_new_tokens, do_sample, temperature, top_k,
    top_p, repetition_penalty, seed, stop, logprobs); max_new_tokens defaults to the bundle's limit."""

    def __init__(
        self,
        bundle_dir: str | Path,
        *,
        variant: str = "auto",
        provider: str = "auto",
        threads: int | None = None,
        max_batch_size: int = 32,
        request_timeout_s: float = 24 * 3600.0,
        engine: Engine | None = None,
        lexicon_file: str | Path | None = None,
    ):
        self.engine = engine or Engine(load_bundle(bundle_dir), variant=variant, provider=provider, threads=threads)
        # the bundle's lexicon with an operator's file on top (LexiconError on a bad line), for generate_text_many
        eng = self.engine
        self.lexicon = Lexicon.load(eng.bundle, lexicon_file, eng.src_tokenizer, eng.tgt_tokenizer)
        word_level = eng.bundle.word_level_source
        self.reader = TextReader(eng.src_tokenizer, eng.tgt_tokenizer, eng.max_source_len) if word_level else None
        self.metrics = ServiceMetrics(self.engine.bundle.model_id)
        self.max_batch_size = max_batch_size
        self.scheduler = Scheduler(
            self.engine,
            self.metrics,
            max_batch_size=max_batch_size,
            max_concurrent_requests=1 << 30,  # in-process callers wait instead of being refused
            request_timeout_s=request_timeout_s,
        )
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.stop()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def options(self, **params: object) -> DecodingOptions:
        params.setdefault("max_new_tokens", self.engine.max_target_len)
        if "stop" in params and params["stop"] is not None:
            params["stop"] = tuple(params["stop"])
        options = DecodingOptions(**params)
        if options.n_rows > self.max_batch_size:
            raise InputError(f"best_of/num_beams need {options.n_rows} batch rows; max_batch_size is {self.max_batch_size}")
        return options

    def submit(self, text: str | list[int], options: DecodingOptions) -> Ticket:
        ids = self.engine.encode_text(text) if isinstance(text, str) else list(text)
        return self.scheduler.submit(ids, options)

    def generate(self, text: str | list[int], **params: object) -> GenerationResult:
        """One input (text or source ids) -> its result; raises InputError for input the model cannot read."""
        # a whole answer: no token's text is read, so none is decoded as it is chosen (DecodingOptions.token_text)
        return _result(self.submit(text, self.options(**{"token_text": False, **params})))

    def generate_many(
        self,
        texts: Iterable[str | list[int]],
        *,
        window: int | None = None,
        on_result: Callable[[int, GenerationResult | InputError], None] | None = None,
        **params: object,
    ) -> Iterator[GenerationResult | InputError]:
        """Results in input order. Up to `window` requests (default 4 x max_batch_size) are in
        flight, so rows that finish are replaced at once. An input the model cannot read yields its
        InputError in its place instead of stopping the run."""
        # whole answers, as from `generate`
        options = self.options(**{"token_text": False, **params})
        window = window or 4 * self.max_batch_size
        pending: collections.deque[tuple[int, Ticket | InputError]] = collections.deque()
        source = iter(enumerate(texts))
        exhausted = False
        while True:
            while not exhausted and len(pending) < window:
                try:
                    i, text = next(source)
                except StopIteration:
                    exhausted = True
                    break
                try:
                    pending.append((i, self.submit(text, options)))
                except InputError as e:
                    pending.append((i, e))
            if not pending:
                return
            i, item = pending.popleft()
            out = item if isinstance(item, InputError) else _result(item)
            if on_result is not None:
                on_result(i, out)
            yield out

    def generate_text_many(
        self, texts: Iterable[str], *, lexicon: bool = True, **params: object
    ) -> Iterator[TextResult | InputError]:
        """Results in input order, answered as the server answers (see the module's docstring); `lexicon`
        False asks the model for every word. A line that cannot be read yields its InputError in its place.
        The model's words of all lines go through `generate_many`, so they share the batch."""
        options = self.options(**params)
        use_lexicon = lexicon and self.lexicon is not None and not options.sampling and not options.top_n_tokens
        n_best = options.n_best
        plans: list[tuple[list[str], list[list[TextAnswer]]] | InputError] = []
        to_model: list[str] = []
        for text in texts:
            try:
                words = [w.text for w in self.reader.words(text)] if self.reader is not None else [text]
            except TextError as e:
                plans.append(InputError(str(e)))
                continue
            known = [self._lexicon_answers(w, options) if use_lexicon else [] for w in words]
            to_model += [w for w, k in zip(words, known) if len(k) < n_best]
            plans.append((words, known))
        results = self.generate_many(to_model, **params)
        for plan in plans:
            if isinstance(plan, InputError):
                yield plan
                continue
            words, known = plan
            answers, error = [], None
            for k in known:
                if len(k) >= n_best:
                    answers.append(k[:n_best])
                    continue
                r = next(results)
                if isinstance(r, InputError):
                    error = error or r
                    continue
                hyps = r.hypotheses or [Hypothesis(r.token_ids, r.logprobs or [], r.finish_reason, text=r.text)]
                taken = {a.text for a in k}
                model = [TextAnswer(h.text, _score(h), "model") for h in hyps if h.text not in taken]
                answers.append((k + model)[:n_best])
            yield error if error is not None else TextResult(words, answers, self.reader.separator if self.reader else "")

    def _lexicon_answers(self, word: str, options: DecodingOptions) -> list[TextAnswer]:
        """The lexicon's answers for a word, best first, cut at max_new_tokens as the server cuts them."""
        out = []
        for a in self.lexicon.lookup(word)[: options.n_best]:
            text = a.text if len(a.ids) <= options.max_new_tokens else self.engine.decode_ids(a.ids[: options.max_new_tokens])
            out.append(TextAnswer(text, None, "lexicon"))
        return out

    def stream(self, text: str | list[int], **params: object) -> Iterator[StepResult]:
        """Tokens as the engine produces them; closing the iterator early cancels the request."""
        ticket = self.submit(text, self.options(**params))
        try:
            while True:
                for ev in ticket.next_events_blocking():
                    if isinstance(ev, Failed):
                        raise GenerationError(ev.error.message)
                    if isinstance(ev, Finished):
                        return
                    yield ev
        finally:
            ticket.cancel()


def _score(h: Hypothesis) -> float | None:
    """The ranking score, when the log-probabilities were kept (logprobs=True, or beam search)."""
    return h.score if h.logprobs or h.eos_logprob is not None else None


def _result(ticket: Ticket) -> GenerationResult:
    """Block until the ticket finishes; its GenerationResult."""
    while True:
        for ev in ticket.next_events_blocking():
            if isinstance(ev, Failed):
                raise GenerationError(ev.error.message)
            if isinstance(ev, Finished):
                return GenerationResult.of(ticket.generation)
