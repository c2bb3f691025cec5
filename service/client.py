"""The in-process Python API: the server's engine and continuous batching, without HTTP.

    from attnserve.service.client import Generator
    with Generator("models/g2p-en") as g:
        g.generate("attention").text                   # 'AH0 T EH1 N SH AH0 N' (the model alone)
        [r.text for r in g.generate_many(words)]       # batched, in input order
        for token in g.stream("attention"): ...        # engine StepResults as they come
        [r.text for r in g.generate_text_many(lines)]  # as the server answers: lexicon first, running text
        next(g.generate_text_many(["I love it 😀"])).warnings  # what was skipped: offsets, why (`details.warnings`)
        next(g.generate_text_many(["Hi, New York"])).word_details()  # words, spans, answers (`details: "words"`)
        g.score("attention", ["AH0 T EH1 N SH AH0 N"])[0].total  # the model's log-probability of an answer (POST /score)

`generate_text_many` answers as the HTTP API does, through the same request layer
(service/requests/frontend.py): a word-level bundle reads running text word by word, the lexicon
answers greedy and beam-search requests for the words it knows (cut at max_new_tokens and at
stop sequences), and the model the others, all in one batch; n-best answers skip a model
answer with the token ids of a lexicon one.

Calls may come from several threads at once: they share one running batch,
exactly as concurrent HTTP requests do.

The generate methods' keywords are this front end's wire schema: `Generator.request` (and `options`, for the
decoding options alone) is its one edge, where they become the request layer's `Request` (service/requests/request.py)
with every default resolved, checked by the HTTP routes' validator (service/requests/validation.py). A refusal is an
`InputError` whose `field` names the option at fault as the TGI routes do (`FIELDS`: `parameters.temperature`,
`inputs`), as the keywords are TGI's parameters; a misspelt keyword is an `UnknownOption` ("did you mean").
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnserve.service.engine.bundle import PACKAGED_BUNDLE, load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine, GenerationResult, InputError, StepResult
from attnserve.service.engine.scheduler import Failed, Finished, Ticket
from attnserve.service.errors import InvalidRequest, ServiceError
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.request import OPTION_NAMES, OutputOptions, Request
from attnserve.service.requests.samples import sample_inputs
from attnserve.service.requests.scoring import ScoredTarget, admit_scores
from attnserve.service.requests.stack import build_stack
from attnserve.service.requests.validation import Limits, check_names, decoding_options, validate
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.text.options import ReadingOptions
from attnserve.service.text.pronunciations import check_pronunciations
from attnserve.service.text.reader import WORD_SEPARATOR, Skipped

DECODING_KEYWORDS = frozenset(f.name for f in dataclasses.fields(DecodingOptions))
# this front end's names of the request's options in its errors (`InputError.field`): the TGI routes' paths
FIELDS: Mapping[str, str] = {
    **{name: f"parameters.{name}" for name in OPTION_NAMES},
    "inputs": "inputs",
    "words_only": "parameters.details",
    "sentences": "parameters.details",
    "targets": "targets",
    "parameters": "parameters",
}


def input_error(e: InvalidRequest) -> InputError:
    """A refusal as this front end raises it: its reason, its field by this front end's name (`FIELDS`)."""
    return InputError(e.reason, FIELDS.get(e.field, e.field) if e.field is not None else None)


class UnknownOption(InputError, TypeError):
    """A keyword parameter that looks like a misspelling of an option's name ("did you mean"); a TypeError, as Python
    calls an unexpected keyword argument."""


class GenerationError(RuntimeError):
    """A request the scheduler ended with an error (timeout, shutdown, engine failure)."""


@dataclass(frozen=True)
class TextAnswer:
    """One answer for a word (or a whole input): its text, the model's score (None from the lexicon), its source."""

    text: str
    score: float | None
    source: str  # "model", "lexicon" or "context"; "mixed" for a line whose words came from more than one
    guessed: bool = False  # a model answer scored below the bundle's guess threshold (details.words[].guessed)


@dataclass
class TextResult:
    """The answer of one input line: each unit's answers, best first (a unit is a word of running
    text for a word-level bundle, else the whole line), and the separator that joins words."""

    words: list[str]
    answers: list[list[TextAnswer]]
    separator: str = WORD_SEPARATOR
    # running text's characters that were not read (an emoji, a letter of another script), with their offsets in
    # the line and why: the HTTP answer's `details.warnings`; empty when nothing was skipped
    warnings: tuple[Skipped, ...] = ()
    # each word's span in the line, line[start:end] (running text); () for a bundle that reads its lines whole
    spans: tuple[tuple[int, int], ...] = ()
    # what goes before each word instead of `separator` (alphabet "espeak": a space, nothing before a mark)
    joints: tuple[str, ...] | None = None

    @property
    def text(self) -> str:
        return self.join([a[0].text for a in self.answers])

    def join(self, texts: list[str]) -> str:
        if self.joints is None:
            return self.separator.join(texts)
        return "".join(j + t for j, t in zip(self.joints, texts))

    def word_details(self) -> list[dict]:
        """The words as the HTTP answer's `details.words` gives them (`details: "words"`): each one's `word` as read,
        its span (`start`, `end`), its best answer (`text`) and `source`."""
        return [
            {"word": w, "start": s, "end": e, "text": a[0].text, "source": a[0].source}
            for w, (s, e), a in zip(self.words, self.spans, self.answers)
        ]

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
                    self.join([p.text for p in picked]),
                    float(np.mean(scores)) if None not in scores else None,
                    sources.pop() if len(sources) == 1 else "mixed",
                    any(p.guessed for p in picked),
                )
            )
        return out


class Generator:
    """Load a bundle once (`bundle_dir`; None: the default model installed with the package); generate with the
    server's scheduler. Keyword parameters of the generate methods are `DecodingOptions` fields (max_new_tokens,
    do_sample, temperature, top_k, top_p, repetition_penalty, seed, stop, logprobs); max_new_tokens defaults to the
    bundle's limit."""

    def __init__(
        self,
        bundle_dir: str | Path | None = None,
        *,
        variant: str = "auto",
        provider: str = "auto",
        threads: int | None = None,
        max_batch_size: int = 32,
        request_timeout_s: float = 24 * 3600.0,
        engine: Engine | None = None,
        lexicon_file: str | Path | None = None,
        context: bool = True,
    ):
        bundle_dir = PACKAGED_BUNDLE if bundle_dir is None else bundle_dir
        self.engine = engine or Engine(load_bundle(bundle_dir), variant=variant, provider=provider, threads=threads)
        # the bundle's lexicon with an operator's file on top (LexiconError on a bad line), for generate_text_many
        eng = self.engine
        self.lexicon = Lexicon.load(eng.bundle, lexicon_file, eng.src_tokenizer, eng.tgt_tokenizer)
        self.max_batch_size = max_batch_size
        # the HTTP service's stack (service/requests/stack.py): the same scheduler, request layer (words, lexicon
        # answers, merging) and validator; no bound but the batch's rows, as in-process callers wait instead of
        # being refused. `context`: heteronyms chosen by their sentence where the bundle has a context component
        stack = build_stack(
            self.engine,
            Limits(max_batch_size=max_batch_size),
            lexicon=self.lexicon,
            max_concurrent_requests=1 << 30,
            request_timeout_s=request_timeout_s,
            context=context,
        )
        self.metrics = stack.metrics
        self.scheduler = stack.scheduler
        self.requests = stack.requests  # the request layer (service/requests/frontend.py)
        self.limits = stack.limits
        self.reader = self.requests.reader
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.stop()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def options(self, **params: object) -> DecodingOptions:
        """`DecodingOptions` of keyword parameters through the one validator (service/requests/validation.py): InputError
        (its `field` as the HTTP routes' errors name it, `parameters.temperature`) for a value the engine cannot
        honour, or a request wider than a batch; `UnknownOption` (a TypeError too) for a misspelt name."""
        params.setdefault("max_new_tokens", self.engine.max_target_len)
        if "stop" in params and params["stop"] is not None:
            params["stop"] = tuple(params["stop"])
        try:
            check_names([k for k in params if k not in DECODING_KEYWORDS], DECODING_KEYWORDS)
        except InvalidRequest as e:
            raise UnknownOption(e.message, f"parameters.{e.field}") from None
        try:
            return decoding_options(params, self.limits)
        except InvalidRequest as e:
            raise input_error(e) from None

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

        def admit(text: str | list[int]) -> Ticket | InputError:
            try:
                return self.submit(text, options)
            except InputError as e:
                return e

        with contextlib.closing(self._in_windows(texts, admit, _result, window)) as outcomes:
            for i, out in enumerate(outcomes):
                if on_result is not None:
                    on_result(i, out)
                yield out

    def generate_text_many(
        self,
        texts: Iterable[str],
        *,
        lexicon: bool | None = None,
        decoder_input_details: bool | None = None,
        punctuation: bool | None = None,
        date_order: str | None = None,
        number_and: bool | None = None,
        window: int | None = None,
        context: bool | None = None,
        alphabet: str | None = None,
        stress: bool | None = None,
        pronunciations: Mapping[str, str] | None = None,
        pronunciations_alphabet: str | None = None,
        **params: object,
    ) -> Iterator[TextResult | InputError]:
        """Results in input order, answered as the server answers (see the module's docstring); every keyword means
        what the HTTP parameter of its name means, None its default (`request`). `lexicon` False asks the model for
        every word, and so does `decoder_input_details` (as over HTTP); `context` False reads heteronyms as the
        lexicon's first entry; `punctuation` keeps running text's pauses as units of their own (the mark is their
        answer, source "punctuation"; default: on for alphabet "espeak", off otherwise); `date_order` orders dates
        written in numbers; `number_and` reads numbers with the British "and". A line that cannot be read yields its
        InputError in its place. Up to `window` lines (default 4 x max_batch_size) are in flight, so the model's
        words of many lines share the batch. `alphabet`
        ("arpabet", "ipa" or "espeak"), `stress`, `pronunciations` ({word or words: ARPAbet, IPA or espeak-ng IPA},
        for these lines only) and `pronunciations_alphabet`: a bad one raises InputError before any line is read.
        Each result's `word_details()` gives what `details: "words"` gives over HTTP."""
        asked = self.request(
            "",
            lexicon=lexicon,
            decoder_input_details=decoder_input_details,
            punctuation=punctuation,
            date_order=date_order,
            number_and=number_and,
            context=context,
            alphabet=alphabet,
            stress=stress,
            pronunciations=pronunciations,
            pronunciations_alphabet=pronunciations_alphabet,
            **{"token_text": False, **params},  # whole answers, as from `generate`
        )
        try:  # the form and the pronunciations are the same for every line: checked once, here
            self.requests.output_form(asked.output)
            if pronunciations:
                check_pronunciations(pronunciations, self.engine.tgt_tokenizer, asked.reading.pronunciations_alphabet)
        except InvalidRequest as e:
            raise input_error(e) from None

        def admit(text: str) -> AdmittedRequest | InputError:
            try:  # the one validator, as the HTTP routes' requests
                return self.requests.admit(validate(self.requests, dataclasses.replace(asked, inputs=text)))
            except InvalidRequest as e:
                return input_error(e)

        yield from self._in_windows(texts, admit, self._text_result, window)

    def request(
        self,
        inputs: str,
        *,
        lexicon: bool | None = None,
        decoder_input_details: bool | None = None,
        punctuation: bool | None = None,
        date_order: str | None = None,
        number_and: bool | None = None,
        context: bool | None = None,
        alphabet: str | None = None,
        stress: bool | None = None,
        pronunciations: Mapping[str, str] | None = None,
        pronunciations_alphabet: str | None = None,
        **params: object,
    ) -> Request:
        """This front end's edge: the request layer's request of `inputs` and keywords (None: the option's default;
        `params`: the decoding options, `options`). InputError (or UnknownOption) naming the option at fault."""
        options = self.options(**params)
        try:
            reading = ReadingOptions.of(
                alphabet,
                lexicon=lexicon,
                context=context,
                punctuation=punctuation,
                date_order=date_order,
                number_and=number_and,
                pronunciations=pronunciations,
                pronunciations_alphabet=pronunciations_alphabet,
            )
        except InvalidRequest as e:
            raise input_error(e) from None
        output = OutputOptions.of(alphabet=alphabet, stress=stress, decoder_input_details=decoder_input_details)
        return Request(inputs, options, reading, output)

    def _text_result(self, job: AdmittedRequest) -> TextResult | InputError:
        try:
            job.wait()
        except InvalidRequest as e:  # a word the engine refused
            return input_error(e)
        except ServiceError as e:
            raise GenerationError(e.message) from None
        answers = [[TextAnswer(text, a.score, a.source, a.guessed) for text, a in job.answer_texts(u)] for u in job.units]
        separator = self.reader.separator if self.reader else ""
        spans = tuple((u.word.start, u.word.end) for u in job.units if u.word is not None)
        joints = tuple(job.written.joints) if job.written is not None else None
        return TextResult([u.text for u in job.units], answers, separator, tuple(job.skipped), spans, joints)

    def samples(self) -> list[str]:
        """Inputs of the model's own task, as GET /samples offers them (service/requests/samples.py); [] when the bundle
        has no parity corpus."""
        return list(sample_inputs(self.requests))

    def score(self, text: str, targets: list[str | list[int]], *, top_n_tokens: int = 0) -> list[ScoredTarget]:
        """The served model's log-probabilities of each target as the answer for `text`, as POST /score gives them
        (service/requests/scoring.py): per target its total, its length-normalised score and its tokens, the end token
        last. The lexicon is never consulted. Raises InputError for an input or a target the model cannot read."""
        if isinstance(targets, str):
            raise InputError("targets must be a list of answers, not one string")
        try:
            return admit_scores(self.requests, text, list(targets), top_n_tokens=top_n_tokens).wait()
        except InvalidRequest as e:
            raise InputError(e.message) from None
        except ServiceError as e:
            raise GenerationError(e.message) from None

    def score_many(
        self, pairs: Iterable[tuple[str, list[str]]], *, window: int | None = None
    ) -> Iterator[list[ScoredTarget] | InputError]:
        """Scores of many (input, targets) pairs in input order, up to `window` (default 4 x max_batch_size) in
        flight so their rows share the batch; a pair that cannot be read yields its InputError in its place."""

        def admit(pair: tuple[str, list[str]]):
            try:
                return admit_scores(self.requests, pair[0], list(pair[1]))
            except InvalidRequest as e:
                return InputError(e.message)

        def finish(job) -> list[ScoredTarget] | InputError:
            try:
                return job.wait()
            except InvalidRequest as e:
                return InputError(e.message)
            except ServiceError as e:
                raise GenerationError(e.message) from None

        yield from self._in_windows(pairs, admit, finish, window)

    def _in_windows(self, items: Iterable, admit: Callable, finish: Callable, window: int | None) -> Iterator:
        """Each item's outcome in input order, with up to `window` (default 4 x max_batch_size) admitted at once so
        their rows share the batch: `admit(item)` starts one, or returns the InputError that takes its place;
        `finish(job)` waits for its outcome. A caller that stops reading (or a failure) cancels the jobs in flight,
        so they leave the batch."""
        window = window or 4 * self.max_batch_size
        pending: collections.deque = collections.deque()
        source = iter(items)
        try:
            while True:
                pending.extend(admit(item) for item in itertools.islice(source, window - len(pending)))
                if not pending:
                    return
                job = pending.popleft()
                yield job if isinstance(job, InputError) else finish(job)
        finally:
            for job in pending:
                if not isinstance(job, InputError):
                    job.cancel()

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


def _result(ticket: Ticket) -> GenerationResult:
    """Block until the ticket finishes; its GenerationResult."""
    while True:
        for ev in ticket.next_events_blocking():
            if isinstance(ev, Failed):
                raise GenerationError(ev.error.message)
            if isinstance(ev, Finished):
                return GenerationResult.of(ticket.generation)
