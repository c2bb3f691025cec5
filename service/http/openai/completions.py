"""OpenAI requests as the request layer's requests, and the answers back in OpenAI's shapes.

A completion (or a chat's one user message) is planned here (`plan`, this front end's edge): its decoding options
(one `DecodingOptions` per request of a prompt), its reading options and its output options, every default resolved,
so each prompt's requests are the request layer's own `Request`s (service/requests/request.py), admitted through the
same validator, request layer (service/requests/frontend.py: running text, the lexicon), scheduler, limits and
metrics as /generate's. A refusal names an internal option; this front end says it by its OpenAI field (`param`:
service/http/openai/errors.py, one table per route).

How the OpenAI parameters map:

- Decoding is greedy unless `temperature` > 0 (an omitted temperature is the model's own default,
  greedy, where OpenAI's default is 1). `top_p` and `top_k` apply only when sampling; `seed` only seeds
  a sampled request.
- `n` > 1 (or `best_of` > 1, or `num_beams`) without sampling: one request, the beam search n-best
  (`best_of` without sampling), the first `n` returned. It cannot be streamed.
- `n` > 1 with sampling: n requests, the j-th seeded with seed + j (the server picks the seed when none
  is given), so every sample is reproducible and streams. `best_of` > `n` with sampling: one request
  with sampled `best_of` candidates, the `n` best by mean log-probability returned (not streamable).
- A list of prompts: its prompts' requests, answered in order; prompt i's j-th choice has index i*n + j.
- `stop`: OpenAI's rule, the text ends before the first stop sequence generated (the engine stops
  there too). A stream holds back the last few characters that could begin a stop sequence.
- `logprobs` (`top_logprobs` for chat): the tokens' log-probabilities and `top_n_tokens`.

Skipped characters (running text: an emoji, a letter of another script) are reported as the TGI routes'
`details.warnings` are: on each choice of a whole answer as the extension field `warnings` (absent when
nothing was skipped), and as a count in the `x-attnserve-skipped-characters` header, whole or streamed
(the stream's chunks are left as OpenAI's).
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from attnserve.service.engine.options import DecodingOptions
from attnserve.service.errors import InvalidRequest, ServiceError
from attnserve.service.http import errors, fields
from attnserve.service.http.openai.choices import Choice, answered_choices
from attnserve.service.http.openai.errors import OpenAIError, bad_request, from_error, param_table
from attnserve.service.http.openai.ranges import check_ranges
from attnserve.service.http.openai.schemas import ChatCompletionRequest, CompletionRequest, SamplingFields
from attnserve.service.http.responses import disconnect_watch
from attnserve.service.http.state import Service
from attnserve.service.requests.frontend import AdmittedRequest
from attnserve.service.requests.request import OutputOptions, Request
from attnserve.service.requests.units import lexicon_answers
from attnserve.service.requests.validation import Limits, check_names, decoding_options, invalid, validate
from attnserve.service.text.options import ReadingOptions

log = logging.getLogger("attnserve.service")


def served_model_name(svc: Service) -> str:
    return svc.settings.served_model_name or svc.engine.bundle.model_id


# ---- the request as the request layer's requests -------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What a completion asks for: each prompt's requests (one, or n seeded samples: their decoding options), how
    many choices each gives, and what the answer shows."""

    prompts: list[str]
    n: int
    decodings: list[DecodingOptions]  # one per request of a prompt
    reading: ReadingOptions
    output: OutputOptions
    choices_per_request: int  # n when one request answers all n choices, else 1
    stream: bool
    stop: tuple[str, ...]
    logprobs: int | None  # None: none asked; k: each token's and the k most likely at each step
    include_usage: bool
    input_param: str  # the field the prompt came in: "prompt" or "messages"
    params: Mapping[str, str]  # this route's table of names: internal -> OpenAI's (errors.PARAMS...)

    @property
    def n_requests(self) -> int:
        return len(self.prompts) * len(self.decodings)

    def requests(self, prompt: str) -> list[Request]:
        """The request layer's requests of one prompt."""
        return [Request(prompt, d, self.reading, self.output) for d in self.decodings]


def unknown_fields(body: SamplingFields, route: str) -> None:
    """Newer clients send fields this server does not know: ignored, with a debug line naming them (and an INFO line
    the first time a name is seen), unless one looks like a misspelling of this server's: a 400 naming it
    (service/http/fields.py)."""
    if not body.model_extra:
        return
    try:
        check_names(body.model_extra, type(body).model_fields)
    except InvalidRequest as e:  # a field of OpenAI's body: its name is its param
        raise bad_request(e.field, e.message) from None
    log.debug("ignored unknown fields on %s: %s", route, ", ".join(sorted(body.model_extra)))
    fields.log_once(body.model_extra, route)


def ignored_headers(body: SamplingFields) -> dict[str, str]:
    """The response header naming the body's ignored fields; {} when there are none."""
    return {fields.HEADER: fields.header_value(body.model_extra)} if body.model_extra else {}


def check_model(svc: Service, model: str) -> None:
    name = served_model_name(svc)
    if model != name:
        raise OpenAIError(
            404,
            f"the model '{model}' does not exist on this server; it serves '{name}' (GET /v1/models)",
            param="model",
            code="model_not_found",
            outcome="validation",
        )


def plan(
    svc: Service,
    body: SamplingFields,
    prompts: list[str],
    *,
    max_tokens: tuple[str, int | None],
    best_of: int | None,
    logprobs: tuple[str, int | None],
    input_param: str,
) -> Plan:
    """This front end's edge: check the fields against the server's limits and build the requests' options, every
    default resolved (400s naming the field). `max_tokens`, `logprobs`: (the field's name in this route, its value)."""
    params = param_table(input_param, max_tokens[0])
    check_model(svc, body.model)
    check_prompts(prompts, input_param)
    check_ranges(body, bool(body.temperature))
    n = body.n or 1
    stream = bool(body.stream)
    max_value, lp_value = max_tokens[1], logprobs[1]
    try:
        check_limits(svc.limits, body, max_new_tokens=max_value, best_of=best_of, top_n_tokens=lp_value)
        sampling, beam, ranked = decoding_kind(body, n, best_of, stream)
        seed = (body.seed if body.seed is not None else secrets.randbits(63)) if sampling else None

        def options(seed_j: int | None, n_best: int | None) -> DecodingOptions:
            max_new_tokens = svc.limits.max_new_tokens if max_value is None else max_value
            values = decoding_values(body, sampling, max_new_tokens, lp_value, seed_j, n_best)
            return decoding_options(values, svc.limits, stream, defaults=body.temperature is None)

        if beam:
            decodings, per_request = [options(None, max(n, best_of or 1))], n
        elif ranked:
            decodings, per_request = [options(seed, best_of)], n
        elif sampling:
            decodings, per_request = [options(seed + j, None) for j in range(n)], 1
        else:
            decodings, per_request = [options(None, None)], 1
        reading = ReadingOptions.of(
            body.alphabet,
            lexicon=body.lexicon,
            context=body.context,
            punctuation=body.punctuation,
            date_order=body.date_order,
            number_and=body.number_and,
            pronunciations=body.pronunciations,
            pronunciations_alphabet=body.pronunciations_alphabet,
            language=body.language,
        )
    except InvalidRequest as e:
        raise from_error(e, params) from None
    # the choices' tokens and words are read from the answer's details
    output = OutputOptions.of(
        alphabet=body.alphabet,
        stress=body.stress,
        details=True,
        words_only=bool(body.details),
        sentences=body.details == "sentences",
    )
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    stop = tuple(body.stop or ())
    planned = Plan(
        prompts, n, decodings, reading, output, per_request, stream, stop, lp_value, include_usage, input_param, params
    )
    try:
        svc.limits.requests(
            planned.n_requests,
            input_param if len(prompts) > 1 else "n",
            lambda limit: (
                f"{len(prompts)} prompt(s) x {len(decodings)} request(s) each = {planned.n_requests} requests, and "
                f"this server runs at most {limit} at once (max_concurrent_requests); send fewer prompts per request"
            ),
        )
    except InvalidRequest as e:  # a field of OpenAI's body: its name is its param
        raise bad_request(e.field, e.message) from None
    return planned


def check_prompts(prompts: list[str], input_param: str) -> None:
    for i, p in enumerate(prompts):
        if not p.strip():
            raise bad_request(input_param if len(prompts) == 1 else f"{input_param}.{i}", "the prompt is empty: send some text")


def check_limits(
    limits: Limits, body: SamplingFields, *, max_new_tokens: int | None, best_of: int | None, top_n_tokens: int | None
) -> None:
    """Every bound of this server's settings (`Limits`, the one place they are compared): an InvalidRequest naming
    the internal option (`n` and `stream_options` are OpenAI's own fields) breaks one."""
    limits.at_most("max_new_tokens", max_new_tokens, limits.max_new_tokens)
    n = body.n or 1
    limits.at_most("n", n, limits.max_best_of, setting=" (max_best_of)")
    if best_of is not None and best_of < n:
        raise invalid("best_of", f"best_of must be at least n ({n}), got {best_of}")
    limits.n_best(best_of, body.num_beams, top_n_tokens)
    if body.stream_options is not None and not body.stream:
        raise invalid("stream_options", "stream_options is only allowed with stream: true")


def decoding_kind(body: SamplingFields, n: int, best_of: int | None, stream: bool) -> tuple[bool, bool, bool]:
    """(sampling, beam, ranked): temperature omitted or 0 is greedy, and then n, best_of or num_beams ask for the beam
    search n-best; sampling with best_of > n is the ranked best_of (TGI's). A stream of answers known only at the end is a
    400 saying what to change."""
    sampling = bool(body.temperature)  # omitted or 0: greedy; num_beams with sampling: the engine refuses it
    beam = not sampling and (n > 1 or (best_of or 1) > 1 or body.num_beams is not None)
    if stream and beam:
        which = "n" if n > 1 else "best_of" if (best_of or 1) > 1 else "num_beams"
        raise bad_request(
            which,
            f"{which}: without sampling (temperature omitted or 0) this is the beam search n-best, which cannot be streamed: "
            "its answers are known only when every beam has finished; set stream: false, or sample (temperature > 0)",
        )
    ranked = sampling and (best_of or n) > n  # TGI's sampled best_of: the n best of best_of candidates
    if stream and ranked:
        raise bad_request("best_of", "best_of > n cannot be streamed: the best are known only when every candidate has finished")
    return sampling, beam, ranked


def decoding_values(
    body: SamplingFields,
    sampling: bool,
    max_new_tokens: int | None,
    top_n_tokens: int | None,
    seed: int | None,
    best_of: int | None,
) -> dict:
    """One request's `DecodingOptions` keyword arguments from the OpenAI body: the sampling fields only when
    sampling (temperature 0 or omitted is greedy, top_k 0 or -1 is off); each token's log-probability and text are
    kept, as the choices' `logprobs` and stop sequences read them."""
    top_k = body.top_k if body.top_k and body.top_k > 0 else None
    return {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": body.min_tokens or 0,
        "do_sample": sampling,
        "temperature": body.temperature if sampling else None,
        "top_k": top_k if sampling else None,
        "top_p": body.top_p if sampling else None,
        "repetition_penalty": body.repetition_penalty,
        "frequency_penalty": body.frequency_penalty,
        "presence_penalty": body.presence_penalty,
        "seed": seed,
        "stop": tuple(body.stop or ()),
        "logprobs": True,
        "best_of": 1 if best_of is None else best_of,
        "num_beams": body.num_beams,
        "top_n_tokens": top_n_tokens or 0,
        "token_text": True,
    }


def admit(svc: Service, planned: Plan) -> list[list[AdmittedRequest]]:
    """Every request of every prompt, admitted through the one validator and the request layer; all or none:
    a refusal cancels those already queued. A refusal of the scheduler (429) for requests that can never be
    admitted together is a 400: retrying would not help. Running text is admitted in chunks (a text needs one
    slot of the bound to start), so what cannot fit is the slots the earlier prompts took plus one per request
    still to admit that needs the model."""
    jobs: list[list[AdmittedRequest]] = []
    row: list[AdmittedRequest] = []
    try:
        for prompt in planned.prompts:
            row = []
            for request in planned.requests(prompt):
                job = svc.requests.admit(validate(svc.requests, request), stream=planned.stream, loop=svc.loop)
                row.append(job)
                if planned.choices_per_request > 1 and len(job.units) > 1:
                    raise bad_request(
                        "n",
                        f"this model reads running text word by word, and the prompt reads as {len(job.units)} words: "
                        "the n-best (n > 1 without sampling, or best_of > n) is per word; send each word as its own prompt "
                        "(a list of prompts), or sample (temperature > 0)",
                    )
            jobs.append(row)
    except (errors.APIError, ServiceError, OpenAIError) as e:
        # the slots this request held (a long text's words waiting for their chunk hold none)
        held = sum(u.ticket is not None and u.ticket.counted for done in jobs for job in done for u in job.units)
        cancel_all([*jobs, row])
        err = from_error(e, planned.params)
        limit = svc.scheduler.max_concurrent_requests
        if err.status == 429 and held + model_units(svc, planned, planned.prompts[len(jobs) :]) > limit:
            raise bad_request(
                planned.input_param,
                f"this request needs more than the {limit} requests this server runs at once (max_concurrent_requests; "
                "each word of running text counts); send fewer prompts or words",
            ) from None
        raise err from None
    return jobs


def model_units(svc: Service, planned: Plan, prompts: list[str]) -> int:
    """The requests of `prompts` that need the engine (running text: one with a word the lexicon cannot answer;
    inputs read whole: every one): how many slots of the server's `max_concurrent_requests` they need at least, as
    running text is admitted in chunks. The lexicon's part is the request layer's own rule (`lexicon_answers`)."""
    total = 0
    for options in planned.decodings:
        if svc.reader is None:
            total += len(prompts)
            continue
        lexicon = svc.lexicon if lexicon_answers(planned.reading, planned.output, options) else None
        for prompt in prompts:
            try:
                words = svc.reader.words(prompt)
            except Exception:  # unreadable: the request layer says so when it is admitted
                words = []
            total += any(lexicon is None or len(lexicon.lookup(w.text)) < options.n_best for w in words)
    return total


def cancel_all(jobs: list[list[AdmittedRequest]]) -> None:
    for row in jobs:
        for job in row:
            job.cancel()


# ---- answering ------------------------------------------------------------------------------------
@dataclass
class Answer:
    id: str
    created: int
    model: str
    choices: list[Choice]
    prompt_tokens: int

    def usage(self) -> dict:
        completion = sum(c.completion_tokens for c in self.choices)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }


def new_id(prefix: str) -> str:
    # unique, not secret: uuid4 reads os.urandom, which cost ~3 ms a call on this VM (service/http/middleware.py)
    return f"{prefix}-{random.getrandbits(128):032x}"


async def answer_whole(svc: Service, request, planned: Plan, jobs: list[list[AdmittedRequest]], prefix: str) -> Answer | None:
    """Wait for every request, then the choices in OpenAI's order; None when the client went away."""
    try:
        for row in jobs:
            for job in row:
                if not await job.collect(disconnect_watch(request)):
                    return None
    except (errors.APIError, ServiceError) as e:
        raise from_error(e, planned.params) from None
    finally:
        cancel_all(jobs)  # after a failure or a disconnect: the others' rows leave the batch (finished ones: nothing)
    choices = []
    for i, row in enumerate(jobs):
        for j, job in enumerate(row):
            choices += answered_choices(job, planned.choices_per_request, i * planned.n + j, planned.stop)
    prompt_tokens = sum(row[0].input_length for row in jobs)
    return Answer(new_id(prefix), int(time.time()), served_model_name(svc), choices, prompt_tokens)


# ---- the requests ----------------------------------------------------------------------------------
def completion_request(svc: Service, body: CompletionRequest) -> Plan:
    """/v1/completions' checks (besides the schema's) and its plan."""
    unknown_fields(body, "/v1/completions")
    if body.echo:
        raise bad_request("echo", "echo: true is not supported: the prompt is not part of the model's output; send echo: false")
    if body.suffix:
        raise bad_request("suffix", "suffix is not supported: this model does not insert text; send null")
    if body.logit_bias:
        raise bad_request("logit_bias", "logit_bias is not supported; send null or {}")
    prompts = [body.prompt] if isinstance(body.prompt, str) else list(body.prompt)
    return plan(
        svc,
        body,
        prompts,
        max_tokens=("max_tokens", body.max_tokens),
        best_of=body.best_of,
        logprobs=("logprobs", body.logprobs),
        input_param="prompt",
    )


def chat_request(svc: Service, body: ChatCompletionRequest) -> Plan:
    """/v1/chat/completions' checks: exactly one user message of text, no tools, no structured output."""
    unknown_fields(body, "/v1/chat/completions")
    accepted = (
        "this model has no conversation format: it answers exactly one message of role 'user' whose content is text "
        "(a string, or a list of 'text' parts)"
    )
    if len(body.messages) != 1:
        raise bad_request("messages", f"{accepted}; got {len(body.messages)} messages (no history, no system message)")
    message = body.messages[0]
    if message.role != "user":
        raise bad_request("messages.0.role", f"{accepted}; got role '{message.role}'")
    content = message.content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request("messages.0.content", f"{accepted}; got a content part of type '{kind}'")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad_request("messages.0.content", f"{accepted}; got {type(content).__name__}")
    for name in ("tools", "tool_choice", "functions", "function_call"):
        if getattr(body, name):
            raise bad_request(name, f"{name} is not supported: this model has no tool or function calling")
    if body.response_format is not None and body.response_format != {"type": "text"}:
        raise bad_request("response_format", "only text output is supported; send null or {'type': 'text'}")
    if body.logit_bias:
        raise bad_request("logit_bias", "logit_bias is not supported; send null or {}")
    if body.max_tokens is not None and body.max_completion_tokens is not None and body.max_tokens != body.max_completion_tokens:
        raise bad_request("max_completion_tokens", "max_tokens and max_completion_tokens differ: send one of them")
    if body.top_logprobs is not None and not body.logprobs:
        raise bad_request("top_logprobs", "top_logprobs needs logprobs: true")
    max_tokens = ("max_completion_tokens", body.max_completion_tokens)
    if body.max_completion_tokens is None:
        max_tokens = ("max_tokens", body.max_tokens)
    return plan(
        svc,
        body,
        [content],
        max_tokens=max_tokens,
        best_of=None,
        logprobs=("top_logprobs", (body.top_logprobs or 0) if body.logprobs else None),
        input_param="messages",
    )
