"""The request layer: a generation request as units, each answered by the lexicon or by the engine.

Every front end calls it: the HTTP routes (service/http/) and the in-process `Generator`
(service/client.py, `attnserve-generate`), so they answer alike by construction:

    layer = RequestLayer(engine, scheduler, lexicon=..., max_input_tokens=...)   # once
    valid = validate(layer, Request(inputs, decoding, reading, output))  # read and check (service/requests/validation.py)
    job = layer.admit(valid, loop=loop, stream=False)  # look up, queue (in chunks)
    await job.collect(gone)  # an event loop's owner: every unit finished (False: the client went away)
    job.wait()                    # a thread's owner: every unit finished
    job.answers(unit)             # a finished unit's answers, best first: the lexicon's, then the model's
    job.stream_items(keepalive_s) # a stream: tokens in text order, as they come

Each front end builds the `Request` once at its edge (service/requests/request.py): the engine's `DecodingOptions`,
the `ReadingOptions` (truncation, whether the lexicon may answer, punctuation, dates, pronunciations) and the
`OutputOptions` (alphabet, stress, which details are asked for). `validate` (service/requests/validation.py, the one
validator every front end calls) reads its input. Refusals are `attnserve.service.errors.InvalidRequest` (what to
fix, and its `field`) and the scheduler's `Overloaded` / `Unavailable`; HTTP maps them to status codes.
What this layer gives back are domain objects (units, answers, stream tokens: service/requests/units.py);
service/http/ alone writes them in a wire format.

Units. A word-level bundle (`bundle.json` `word_level_source`) reads running text word by
word (service/text/reader.py): each word is a unit. Any other bundle reads its input whole: one unit.

Who answers a unit. The lexicon (service/text/lexicon.py) answers greedy requests, beam search
(best_of without sampling) included, unless the request says `"lexicon": false`. Sampled
requests, `top_n_tokens` and `decoder_input_details` always go to the model: they ask for the
model's own distribution. With best_of N, the lexicon's answers come first, in dictionary
order, and the model's beams fill the rest (a beam with the token ids of a lexicon answer is
skipped); a unit the lexicon answers fully never reaches the engine. A word whose reading the
reader's rules fixed (an acronym spelt, an accented word: `Word.pronunciation`) is answered that
way, as a lexicon entry, whenever the lexicon may answer; a mark kept with `punctuation` is
answered by itself (`punctuation_answer`) and never reaches either. The units the model
answers are queued together (`Scheduler.submit_many`), so they share decoder steps, in chunks:
at most `Scheduler.text_chunk` of a text's words count toward `max_concurrent_requests` at once
(queued or running), the others waiting uncounted for their turn, so a text of more unknown
words than the bound is read, not refused, and other requests still get in while it runs. A
text is refused (Overloaded: 429) only when the bound has no room for its first word.

A lexicon answer is a real token sequence: the target tokenizer's ids with logprob null, then
the end token (finish reason `eos_token`); its score is null. `max_new_tokens` applies to each
unit, so a longer lexicon answer is cut (finish reason `length`), as the model's would be, and a
stop sequence ends it after the first token that completes it (finish reason `stop_sequence`).

Running text's answer: `generated_text` is the words' best answers joined by the word
separator (`" | "`); the tokens are all the words' tokens, end tokens included, with the
separator put in front of the text of each word's first token (`AdmittedRequest.separated`), so
the token texts concatenate to `generated_text`, in the details as in the stream. A single
unit answers as the model alone would, with the lexicon's answers first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

from tokenizers import Tokenizer

from attnserve.service.engine.bundle import LoadedBundle
from attnserve.service.engine.engine import DecodingOptions, Engine, InputError
from attnserve.service.engine.options import request_seed
from attnserve.service.engine.scheduler import Failed, Finished, Scheduler
from attnserve.service.errors import InvalidRequest
from attnserve.service.requests.alphabets import EspeakText, FormUnsupported, OutputForm, output_form
from attnserve.service.requests.overrides import as_given, pronounce
from attnserve.service.requests.parts import PartsPlan, PartsTicket, compound_ids
from attnserve.service.requests.request import OutputOptions
from attnserve.service.requests.streaming import stream_items
from attnserve.service.requests.units import (
    Answer,
    CaughtUp,
    StreamToken,
    Token,
    Unit,
    hypothesis_tokens,
    is_mark,
    lexicon_answer,
    lexicon_answers,
    step_token,
    top_tokens,
)
from attnserve.service.requests.validation import ValidRequest
from attnserve.service.text.context import context_chooser, rank_by_context
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.text.options import DEFAULT_READING, ReadingOptions
from attnserve.service.text.parts import InParts, split_word
from attnserve.service.text.pronunciations import Pronunciations
from attnserve.service.text.reader import MAX_TEXT_CHARS, MAX_WORDS, Skipped, TextError, TextReader, Word

ANSWERS_KEPT = 1 << 16  # distinct lexicon answers kept made (`RequestLayer.known_answer`); more start again


def word_reader(
    bundle: LoadedBundle,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    max_chars: int = MAX_TEXT_CHARS,
    max_words: int = MAX_WORDS,
) -> TextReader | None:
    """The reader of running text for a word-level bundle (`bundle.json` `word_level_source`); None for any other
    bundle: its model reads inputs whole."""
    if not bundle.word_level_source:
        return None
    return TextReader(src_tokenizer, tgt_tokenizer, max_chars=max_chars, max_words=max_words)


class RequestLayer:
    """The request layer of one engine and its scheduler: `admit` turns an input into units, answers what
    the lexicon knows and queues the rest. `max_input_tokens`: the longest input, or word, in source tokens
    (default: the bundle's `max_source_len`); `max_chars` and `max_words` bound running text."""

    def __init__(
        self,
        engine: Engine,
        scheduler: Scheduler,
        *,
        lexicon: Lexicon | None = None,
        max_input_tokens: int | None = None,
        max_chars: int = MAX_TEXT_CHARS,
        max_words: int = MAX_WORDS,
        context: bool = True,
    ):
        self.engine = engine
        self.scheduler = scheduler
        self.lexicon = lexicon  # known answers before the model (service/text/lexicon.py); None: the model answers all
        # heteronyms chosen by their sentence among the lexicon's answers (service/text/context.py); None: the
        # bundle has no context component, or it is turned off (`ATTNSERVE_CONTEXT=false`)
        path, listed = engine.bundle.context_path, (engine.bundle.meta.get("context") or {}).get("homographs")
        self.context = context_chooser(path, listed) if context and path is not None and lexicon is not None else None
        self.max_input_tokens = max_input_tokens or engine.max_source_len
        src, tgt = engine.src_tokenizer, engine.tgt_tokenizer
        self.reader = word_reader(engine.bundle, src, tgt, max_chars, max_words)
        self._fixed: dict[str, tuple[int, ...]] = {}  # fixed readings' target ids (`fixed_ids`)
        self._known: dict[tuple, tuple] = {}  # lexicon answers made (`known_answer`)
        self._answered: dict[tuple, dict[str, tuple[Answer, ...]]] = {}  # `_word_answers`, of the lexicon `_answered_by`
        self._answered_by: Lexicon | None = None
        self._forms: dict[tuple[str, bool], OutputForm | None] = {}

    def admit(
        self, valid: ValidRequest, *, stream: bool = False, loop: asyncio.AbstractEventLoop | None = None
    ) -> AdmittedRequest:
        """Answer what the lexicon knows of a validated request (service/requests/validation.py `validate`) and queue
        the rest on the engine (in chunks). `loop`: the event loop of an asyncio owner (None: a thread waits with
        `wait`); `stream`: the owner reads tokens as they come. Raises the scheduler's Overloaded / Unavailable
        (InvalidRequest only for what the engine itself refuses)."""
        request, units = valid.request, valid.units
        inputs, options, reading, output = request.inputs, request.decoding, request.reading, request.output
        if options.sampling and options.seed is None:
            # one seed for every word, picked here (the engine's rule) and reported back: the same request reproduces
            options = dataclasses.replace(options, seed=request_seed(options))
        if valid.pronunciations is not None:
            units = self.pronounce(inputs, units, valid.pronunciations, options)
        espeak = valid.form is not None and valid.form.alphabet == "espeak" and self.reader is not None
        # the request's own readings, which keep their answer in espeak's running text
        pinned = frozenset(k for k, u in enumerate(units) if u.known and not is_mark(u)) if espeak else frozenset()
        if lexicon_answers(reading, output, options):
            self.answer_known(inputs, units, reading, options)
        # running text as Piper's phonemizer joins it: weak forms, marks, spaces
        written = EspeakText(valid.form, inputs, units, pinned) if espeak else None
        to_model = [u for u in units if len(u.known) < options.n_best and not is_mark(u)]
        # an asyncio owner that reads its answer whole is woken once per ending ticket, on one event
        ready = asyncio.Event() if loop is not None and not stream else None
        parted = []
        if to_model:
            # in chunks: a text of more such words than the bound is admitted as the queue allows, not refused
            # (Overloaded only when the queue has no room for its first word); its other words wait their turn
            parted = self.parts_plan(reading, output, options).queue(inputs, to_model, options, loop, ready)
        job = AdmittedRequest(
            self.engine, self.reader, inputs, output, options, units, valid.t_arrival, ready, valid.form, written
        )
        job.skipped = valid.skipped
        for t in parted:  # a word read again in parts is named in the answer's warnings
            t.warnings = job.skipped
        return job

    def parts_plan(self, reading: ReadingOptions, output: OutputOptions, options: DecodingOptions) -> PartsPlan:
        """How this request's words reach the model, the long ones in parts (service/requests/parts.py)."""
        known = self.part_ids if self.lexicon is not None and lexicon_answers(reading, output, options) else None
        encode = self.reader.encode if self.reader is not None else self.engine.tokenize_text
        return PartsPlan(self.scheduler, self.engine, encode, known, self.lexicon, self.max_input_tokens)

    def part_ids(self, part: str) -> tuple[int, ...] | None:
        """A part's reading from the lexicon (its first entry's ids), None when the lexicon does not know it."""
        entries = self.lexicon.lookup(part)
        return entries[0].ids if entries else None

    def answer_known(self, inputs: str, units: list[Unit], reading: ReadingOptions, options: DecodingOptions) -> None:
        """Give the units the lexicon knows their answers (at most n_best each): a reading the reader's rules fixed,
        or the lexicon's entries, a heteronym's ordered by its sentence. A word's answers are made once per distinct
        word and request shape (`_word_answers`) and shared by its occurrences."""
        chooser = self.context if reading.context else None
        lexicon = self.lexicon
        made = self._word_answers(options)
        for u in units:
            if u.known:  # a mark of punctuation, or the request's own pronunciation
                continue
            w, text = u.word, u.text
            if w is not None and w.pronunciation is not None:  # the reader's rules fixed it (letters spelt)
                u.known = [self.known_answer(self.fixed_ids(w.pronunciation), options)]
                continue
            if lexicon is None:
                continue
            if chooser is not None and w is not None and chooser.covers(text.lower()):
                # a heteronym: its sentence orders the lexicon's pronunciations (service/text/context.py)
                entries, candidates = rank_by_context(chooser, text.lower(), lexicon.lookup(text), inputs, w.start, w.end)
                u.known = [self.known_answer(a.ids, options) for a in entries[: options.n_best]]
                if candidates is not None and u.known:
                    u.known[0].source, u.known[0].candidates = "context", candidates
                continue
            answers = made.get(text)
            if answers is None:
                answers = made[text] = tuple(self.known_answer(a.ids, options) for a in lexicon.lookup(text)[: options.n_best])
            u.known = list(answers)  # shared by the word's occurrences: answers are not changed once made
            if not answers and w is not None:  # a compound of dictionary words (service/text/compounds.py)
                ids = compound_ids(inputs[w.start : w.end], text, lexicon, self.fixed_ids)
                if ids is not None:
                    u.known = [self.known_answer(ids, options)]
                    u.known[0].source = "parts"

    def _word_answers(self, options: DecodingOptions) -> dict[str, tuple[Answer, ...]]:
        """The lexicon's answers by word for requests of this n_best, length bound and stop sequences: kept while the
        lexicon stays the same (a reload replaces it), at most ANSWERS_KEPT words of each shape."""
        if self._answered_by is not self.lexicon:
            self._answered_by, self._answered = self.lexicon, {}
        key = (options.n_best, options.max_new_tokens, tuple(options.stop))
        words = self._answered.get(key)
        if words is None or len(words) >= ANSWERS_KEPT:
            if len(self._answered) >= 16:  # request shapes seldom vary; a client that varies them starts again
                self._answered.clear()
            words = self._answered[key] = {}
        return words

    def known_answer(self, ids: tuple[int, ...], options: DecodingOptions) -> Answer:
        """`lexicon_answer` of `ids` under the request's length bound and stop sequences, made once per distinct
        answer (its tokens' texts take a decode each) and copied for each word that has it."""
        key = (ids, options.max_new_tokens, tuple(options.stop))
        made = self._known.get(key)
        if made is None:
            a = lexicon_answer(self.engine, ids, options.max_new_tokens, options.stop)
            made = (a.text, tuple(a.tokens), a.finish_reason, a.generated_tokens)
            if len(self._known) >= ANSWERS_KEPT:
                self._known.clear()
            self._known[key] = made
        return Answer(made[0], list(made[1]), made[2], made[3], None, "lexicon")

    def fixed_ids(self, pronunciation: str) -> tuple[int, ...]:
        """The target ids of a reading the reader's rules fixed (its phonemes are in the target vocabulary)."""
        ids = self._fixed.get(pronunciation)
        if ids is None:
            ids = tuple(self.engine.tgt_tokenizer.encode(pronunciation, add_special_tokens=False).ids)
            self._fixed[pronunciation] = ids
        return ids

    def output_form(self, output: OutputOptions) -> OutputForm | None:
        """The form the answer is written in (None: the model's own); InvalidRequest when the model has no other."""
        key = (output.alphabet, output.stress)
        if key not in self._forms:
            tgt = self.engine.tgt_tokenizer
            try:
                self._forms[key] = output_form(output.alphabet, output.stress, tgt, set(self.engine.special_token_ids))
            except FormUnsupported as e:
                raise InvalidRequest(str(e), field="alphabet" if output.alphabet != "arpabet" else "stress") from None
            except ValueError as e:
                raise InvalidRequest(str(e), field="alphabet") from None
        return self._forms[key]

    def pronounce(self, inputs: str, units: list[Unit], found: Pronunciations, options: DecodingOptions) -> list[Unit]:
        """Give the words a request's pronunciations name their answer (service/requests/overrides.py)."""
        return pronounce(self.engine, inputs, units, found, options)

    def units(self, text: str, reading: ReadingOptions | None = None) -> list[Unit]:
        """The units of an input: its words (a word-level bundle), else the whole input, each within
        `max_input_tokens`. `reading.truncate` keeps the input's last `truncate` source tokens before it is
        read. Raises InvalidRequest naming what cannot be read."""
        return self.read(text, reading)[0]

    def read(self, text: str, reading: ReadingOptions | None = None) -> tuple[list[Unit], list[Skipped]]:
        """`units`, and the characters of running text that were skipped (unreadable symbols, emoji, other scripts),
        read as `reading` says (None: the defaults): `punctuation` makes running text's pauses units too, answered by
        their mark (`punctuation_answer`); `date_order` orders a date written in numbers."""
        reading = reading or DEFAULT_READING
        truncate = reading.truncate
        if not text.strip():  # nothing to read, whether empty or blank
            raise InvalidRequest("input text is empty", field="inputs")
        skipped: list[Skipped] = []
        if self.reader is None:
            try:
                if truncate is not None:
                    text = self.keep_last_tokens(text, truncate)
                units = [Unit(text, None, self.engine.tokenize_text(text), [])]
            except InputError as e:
                raise InvalidRequest(str(e), field="inputs") from None
            self.check_length(units[0])
            return units, skipped
        words, skipped = self.read_words(text, reading)
        units, limit = [], self.max_input_tokens
        for w in words:
            u = Unit(w.text, w, list(w.source_ids), [])
            units.append(u)
            if w.punctuation:  # answered by its mark: it never reaches the lexicon or the model
                u.known = [self.punctuation_answer(u.text)]
            elif len(w.source_ids) > limit:  # read in parts, not refused
                u.parts = split_word(u.text, self.lexicon, limit)
                reason = f"{len(w.source_ids)} tokens long; this model reads at most {limit}"
                skipped.append(InParts(w.start, w.end, text[w.start : w.end], reason))
                if len(skipped) > 1:
                    skipped.sort(key=lambda s: s.start)
        return units, skipped

    def check_length(self, u: Unit) -> None:
        """The one check of an input's length against the server's `max_input_tokens`: a word of running text,
        or the whole input. InvalidRequest when it is longer."""
        n, limit = len(u.source_ids), self.max_input_tokens
        if n <= limit:
            return
        if u.word is not None:
            raise InvalidRequest(f"word {u.word.text!r} is {n} tokens long; this model reads at most {limit}", field="inputs")
        raise InvalidRequest(
            f"input is {n} tokens long; this server accepts at most {limit} (or set parameters.truncate)", field="inputs"
        )

    def punctuation_answer(self, mark: str) -> Answer:
        """A kept mark of punctuation as an answer: one token whose text is the mark. No target token spells it, so
        the token carries the target vocabulary's unknown id; it has no end token and no log-probability."""
        token = Token(self.engine.tgt_tokenizer.token_to_id("<unk>"), mark, None, False)
        return Answer(mark, [token], "eos_token", 1, None, "punctuation")

    def read_words(self, text: str, options: ReadingOptions) -> tuple[list[Word], list[Skipped]]:
        """The words of running text, spans into `text`, and what was skipped; InvalidRequest naming what cannot
        be read. The lexicon tells the reader which all-capital words are words (NASA) and which are spelt (GPU)."""
        offset = 0
        if options.truncate is not None:
            kept = self.keep_last_tokens(text, options.truncate)
            offset, text = len(text) - len(kept), kept
        try:
            reading = self.reader.read(text, self.lexicon, options)
        except TextError as e:
            raise InvalidRequest(str(e), field="inputs") from None
        if not offset:
            return reading.words, reading.skipped
        words = [dataclasses.replace(w, start=w.start + offset, end=w.end + offset) for w in reading.words]
        skipped = [dataclasses.replace(s, start=s.start + offset, end=s.end + offset) for s in reading.skipped]
        return words, skipped

    def keep_last_tokens(self, text: str, n: int) -> str:
        """TGI's `truncate`: keep the last n source tokens (cut the text where the n-th from the end begins)."""
        offsets = self.engine.src_tokenizer.encode(text, add_special_tokens=False).offsets
        return text if len(offsets) <= n else text[offsets[-n][0] :]


class AdmittedRequest:
    """One generation request: its units, the lexicon's answers, the engine's tickets. Made by `RequestLayer.admit`."""

    def __init__(
        self,
        engine: Engine,
        reader: TextReader | None,
        inputs: str,
        output: OutputOptions,
        options: DecodingOptions,
        units: list[Unit],
        t_arrival: float,
        ready: asyncio.Event | None = None,
        form: OutputForm | None = None,
        written: EspeakText | None = None,
    ):
        self.engine = engine
        self.reader = reader
        self.inputs = inputs
        self.output = output  # what the answer shows (details, words, the input in front)
        self.options = options
        self.units = units
        self.t_arrival = t_arrival
        self.ready = ready  # what the tickets set when one ends (an asyncio owner reading whole answers: `collect`)
        self.skipped: list[Skipped] = []  # running text's characters that were not read (the details' warnings)
        self.form = form  # the answer's alphabet and stress (service/requests/alphabets.py); None: the model's own
        # espeak's running text: weak forms, marks and joints by unit (None in every other form)
        self.written = written
        self._index = {id(u): k for k, u in enumerate(units)} if written is not None else None

    def cancel(self) -> None:
        """Drop every unit's rows from the batch (the client went away, or another unit failed)."""
        for u in self.units:
            if u.ticket is not None:
                u.ticket.cancel()

    # ---- what the answer says -------------------------------------------------------------------
    @property
    def seed(self) -> int | None:
        """The seed a sampled request used (every word's); None otherwise."""
        return self.options.seed if self.options.sampling else None

    @property
    def input_length(self) -> int:
        return sum(len(u.source_ids) for u in self.units)

    def best_text(self, u: Unit) -> str:
        if self.written is not None:
            k = self._index[id(u)]
            if k in self.written.marks:
                return self.written.marks[k]
            answer = u.known[0].text if u.known else u.ticket.generation.text
            return as_given(u, self.form) or self.form.spoken(answer, self.written.weak.get(k), k in self.written.linked)
        if self.form is not None and not is_mark(u):
            return as_given(u, self.form) or self.form.text(u.known[0].token_ids if u.known else u.ticket.generation.token_ids)
        return u.known[0].text if u.known else u.ticket.generation.text

    def generated_text(self) -> str:
        """The answer's text: the best answer of each unit, joined by the word separator (running text; in espeak's
        form as Piper's phonemizer joins words: `EspeakText`)."""
        texts = [self.best_text(u) for u in self.units]
        if self.written is not None:
            text = self.written.join(texts)
        else:
            text = self.reader.join(texts) if self.reader is not None else texts[0]
        return self.inputs + text if self.output.return_full_text else text

    def answers(self, u: Unit) -> tuple[list[Answer], list[list[Token] | None] | None]:
        """A finished unit's answers, best first (the lexicon's, then the model's beams that differ from
        them, n_best in all), and the model's top tokens per step when asked for; in the request's form."""
        answers, top = self.own_answers(u)
        how = self._written_as(u, len(answers))
        if isinstance(how, str):  # espeak: a kept mark as Piper writes it
            return [dataclasses.replace(a, text=how, tokens=[t.with_text(how) for t in a.tokens]) for a in answers], top
        if how is None:
            return answers, top
        written = [
            dataclasses.replace(a, text=self.form.text(a.token_ids, w, n), tokens=self.form.tokens(a.tokens, w, n))
            for a, (w, n) in zip(answers, how)
        ]
        return written, self.form.top(top)

    def answer_texts(self, u: Unit) -> list[tuple[str, Answer]]:
        """`answers`' texts, each with its answer in the model's own form: for owners that show no tokens (the
        library, the in-process client), which need not have every token's text rewritten."""
        answers, _ = self.own_answers(u)
        how = self._written_as(u, len(answers))
        if isinstance(how, str):
            return [(how, a) for a in answers]
        if how is None:
            return [(a.text, a) for a in answers]
        return [(self.form.text(a.token_ids, w, n), a) for a, (w, n) in zip(answers, how)]

    def _written_as(self, u: Unit, n: int) -> str | list[tuple[str | None, bool]] | None:
        """How a unit's `n` answers are written: a kept mark's text (espeak), None for their own text (the model's
        form, or a mark in any other), else each one's weak form and linking r (`OutputForm.text`)."""
        k = self._index[id(u)] if self.written is not None else None
        if k is not None and k in self.written.marks:
            return self.written.marks[k]
        if self.form is None or is_mark(u):  # a kept mark of punctuation is written as itself in every other form
            return None
        weak, link = (self.written.weak.get(k), k in self.written.linked) if k is not None else (None, False)
        weak = as_given(u, self.form) or weak  # a request's pronunciation written in the answer's form, as written
        return [(weak, link)] + [(None, False)] * (n - 1)

    def own_answers(self, u: Unit) -> tuple[list[Answer], list[list[Token] | None] | None]:
        """`answers` in the model's own form."""
        if u.ticket is None:
            return u.known, None
        gen = u.ticket.generation
        best = gen.hypotheses[0]
        top = None
        if gen.streams:  # one row, decided token by token: the step results are its tokens
            tokens = [step_token(r) for r in u.results]
            if self.options.top_n_tokens:
                ids = [r.token_id for r in u.results]
                top = [top_tokens(self.engine, r.top_tokens, ids[:k]) for k, r in enumerate(u.results)]
        else:
            tokens = hypothesis_tokens(self.engine, best)
        scored = bool(best.logprobs) or best.eos_logprob is not None
        source = u.ticket.source if isinstance(u.ticket, PartsTicket) else "model"
        score = best.score if scored else None
        threshold = self.engine.bundle.guess_threshold
        guessed = source == "model" and score is not None and threshold is not None and score < threshold
        model = [Answer(gen.text, tokens, u.finished.finish_reason, best.generated_tokens, score, source, guessed=guessed)]
        sampled = self.options.sampling  # a sampled candidate says which it was; beams do not
        model += [
            Answer(
                h.text,
                hypothesis_tokens(self.engine, h),
                h.finish_reason,
                h.generated_tokens,
                h.score,
                "model",
                h.index if sampled else None,
                h.seed,
            )
            for h in gen.hypotheses[1:]
        ]
        if not u.known:
            return model, top
        taken = [a.token_ids for a in u.known]
        return (u.known + [a for a in model if a.token_ids not in taken])[: self.options.n_best], None

    def separated(self, token: Token, unit: int, position: int) -> Token:
        """A token of running text: the first token of every word after the first carries the separator
        in front of its text, so the tokens' texts concatenate to generated_text."""
        if unit == 0 or position != 0 or self.reader is None:
            return token
        joint = self.written.joints[unit] if self.written is not None else self.reader.separator
        return token.with_text(joint + token.text)

    def n_tokens(self) -> int:
        """Tokens of the answer (x-generated-tokens)."""
        return sum(u.known[0].generated_tokens if u.known else u.ticket.n_tokens for u in self.units)

    def timings(self) -> dict[str, float]:
        """Seconds: total, queue, inference, per token, over all of the request's tickets (TGI's x-* headers)."""
        tickets = [u.ticket for u in self.units if u.ticket is not None]
        if len(tickets) == 1 and len(self.units) == 1:
            return tickets[0].timings()
        now = time.perf_counter()
        if not tickets:  # the lexicon answered everything
            return {"total": now - self.t_arrival, "queue": 0.0, "inference": 0.0, "per_token": 0.0}
        admitted = min(t.t_admitted or now for t in tickets)
        inference = max(0.0, max(t.t_last_token or now for t in tickets) - admitted)
        n = sum(t.n_tokens for t in tickets)
        return {
            "total": now - self.t_arrival,
            "queue": max(0.0, admitted - self.t_arrival),
            "inference": inference,
            "per_token": inference / n if n else 0.0,
        }

    # ---- waiting for the engine -------------------------------------------------------------------
    async def collect(self, gone: asyncio.Future) -> bool:
        """Wait until every unit the model answers has finished: True; False when the client went away
        first (its rows are then cancelled). `gone`: a future done when the client has gone (the front end watches
        its own protocol: service/http/responses.py `disconnect_watch`), cancelled here once the wait is over.
        Raises the ServiceError of a unit that failed (timeout, shutdown), the other units cancelled."""
        waiting = [u for u in self.units if u.ticket is not None]
        if not waiting:
            gone.cancel()
            return True
        # one task (the disconnect watch) and one event per request, not a task per word: each is event-loop CPU
        ready = self.ready
        gone.add_done_callback(lambda _: ready.set())
        ok = False
        try:
            while True:
                ready.clear()
                waiting = [u for u in waiting if not _take(u, u.ticket.take_events())]  # raises a failed unit's error
                if not waiting:
                    ok = True
                    return True
                if gone.done():
                    return False
                await ready.wait()
        finally:
            gone.cancel()
            if not ok:
                self.cancel()  # the client went away, or a unit failed: the others' rows leave the batch

    def wait(self) -> None:
        """Block until every unit the model answers has finished (a thread's owner: admitted without a loop).
        Raises the ServiceError of a unit that failed, the other units cancelled."""
        try:
            for u in self.units:
                while u.ticket is not None and not _take(u, u.ticket.next_events_blocking()):
                    pass
        except BaseException:
            self.cancel()
            raise

    def stream_items(self, keepalive_s: float) -> AsyncIterator[StreamToken | Failed | CaughtUp | None]:
        """The answer's tokens in text order as the engine makes them (service/requests/streaming.py `stream_items`)."""
        return stream_items(self, keepalive_s)


def _take(u: Unit, events: list) -> bool:
    """Take a unit's step results: whether it has finished; raises its ServiceError if it failed."""
    for ev in events:
        if isinstance(ev, Failed):
            raise ev.error
        if isinstance(ev, Finished):
            u.finished = ev
            return True
        u.results.append(ev)
    return u.finished is not None
