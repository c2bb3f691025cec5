"""OpenAI's request and response bodies for /v1/completions, /v1/chat/completions and /v1/models, so /docs is exact.

The schemas check JSON types only: each number's range (the engine's, or OpenAI's narrower one) is checked by
service/http/openai/ranges.py, and /docs shows it from there (a 400 whose `param` names the field); what needs the
server's limits (`max_new_tokens`, `max_best_of`, `max_top_n_tokens`) or spans several fields is checked in
service/http/openai/completions.py. Unknown fields are kept (`extra="allow"`) so that the route can
log them at debug level and go on: newer clients send fields this server has never heard of.
A value has its JSON type and a number is finite, as on the TGI routes (service/http/schemas.py) and as
OpenAI's own API checks: `"max_tokens": "5"` and `"temperature": "0.5"` are refused, not coerced.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from attnserve.service.http.openai.ranges import documented
from attnserve.service.http.schemas import (
    DATE_ORDER_DESCRIPTION,
    LANGUAGE_DESCRIPTION,
    NUMBER_AND_DESCRIPTION,
    DateOrder,
    SentenceDetails,
    TextWarning,
    WordDetails,
)

MAX_STOP = 4  # OpenAI's limit on stop sequences


def _stop_list(value: Any) -> Any:
    """`stop`: a string or a list of at most 4 non-empty strings -> a list (None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ValueError("must be a string or a list of strings")
    if len(value) > MAX_STOP:
        raise ValueError(f"at most {MAX_STOP} stop sequences, got {len(value)}")
    if not all(value):
        raise ValueError("stop sequences must be non-empty strings")
    return value


# JSON types, not coerced; unknown fields kept (see above)
REQUEST_CONFIG = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class StreamOptions(BaseModel):
    model_config = REQUEST_CONFIG

    include_usage: bool | None = Field(
        None, description="Send a last chunk with `usage` and `choices: []` before `data: [DONE]`."
    )


class SamplingFields(BaseModel):
    """What /v1/completions and /v1/chat/completions share."""

    model_config = REQUEST_CONFIG

    model: str = Field(..., description="The served model's name (GET /v1/models; ATTNSERVE_SERVED_MODEL_NAME).")
    max_tokens: int | None = Field(
        None,
        json_schema_extra=documented("max_tokens"),
        description="Most tokens per choice; default and ceiling: the server's `max_new_tokens` (not 16).",
    )
    temperature: float | None = Field(
        None,
        json_schema_extra=documented("temperature"),
        description="Sampling temperature. Omitted or 0: greedy decoding (the model's own default, where OpenAI's is 1); "
        "> 0: sampling.",
    )
    top_p: float | None = Field(
        None, json_schema_extra=documented("top_p"), description="Nucleus sampling mass; applies only when temperature > 0."
    )
    n: int | None = Field(
        None,
        json_schema_extra=documented("n"),
        description="Choices per prompt, at most the server's `max_best_of`. Without sampling: the beam search n-best "
        "(not streamable); with sampling: n samples, the j-th seeded with seed + j.",
    )
    stop: list[str] | None = Field(
        None, description=f"A string or up to {MAX_STOP} strings; the text ends before the first one generated."
    )
    stream: bool | None = Field(False, description="Answer Server-Sent Events, then `data: [DONE]`.")
    stream_options: StreamOptions | None = Field(None, description="Only with `stream`.")
    seed: int | None = Field(
        None,
        json_schema_extra=documented("seed"),
        description="Seed of a sampled request (reproducible); the server picks one when absent.",
    )
    frequency_penalty: float | None = Field(
        None,
        json_schema_extra=documented("frequency_penalty"),
        description="Subtract this times a token's count so far from its logit.",
    )
    presence_penalty: float | None = Field(
        None,
        json_schema_extra=documented("presence_penalty"),
        description="Subtract this from the logit of every token generated at least once.",
    )
    user: str | None = Field(None, description="Accepted and ignored.")
    # extensions, as vLLM accepts them
    top_k: int | None = Field(
        None,
        json_schema_extra=documented("top_k"),
        description="Extension: keep the k most likely tokens when sampling (0 or -1: off).",
    )
    repetition_penalty: float | None = Field(
        None, json_schema_extra=documented("repetition_penalty"), description="Extension: CTRL's penalty (1.0: off)."
    )
    num_beams: int | None = Field(
        None,
        json_schema_extra=documented("num_beams"),
        description="Extension: beam width when larger than n / best_of (no sampling).",
    )
    min_tokens: int | None = Field(
        None,
        json_schema_extra=documented("min_tokens"),
        description="Extension (vLLM's): fewest tokens to generate before the end token may be chosen (0: none).",
    )
    lexicon: bool | None = Field(
        None, description="Extension: false asks for the model's own answer even when the bundle's lexicon knows the input."
    )
    punctuation: bool | None = Field(
        None,
        description="Extension, word-level bundles: true keeps sentence and phrase punctuation as its own tokens between "
        "the words' answers (docs/TEXT.md). Default: on with alphabet `espeak`, off otherwise.",
    )
    date_order: DateOrder | None = Field(None, description=DATE_ORDER_DESCRIPTION)
    number_and: bool | None = Field(None, description=NUMBER_AND_DESCRIPTION)
    # output forms and per-request pronunciations, as the TGI routes' parameters of the same names
    alphabet: Literal["arpabet", "ipa", "espeak"] | None = Field(
        None,
        description="Extension: `arpabet` (default), `ipa` or `espeak` (espeak-ng's IPA, for Piper voices: docs/IPA.md); "
        "the tokens of `logprobs` are in the same alphabet.",
    )
    stress: bool | None = Field(None, description="Extension: false leaves out stress (ARPAbet's digits, IPA's marks).")
    pronunciations: dict[str, str] | None = Field(
        None,
        description="Extension: {word or words: ARPAbet, IPA or espeak-ng IPA} for this request only; an all-caps key "
        "matches only all-caps words, a key of several words matches them one after another.",
    )
    pronunciations_alphabet: Literal["arpabet", "ipa", "espeak"] | None = Field(
        None, description="Extension: how every value of `pronunciations` is written; null: each one's is detected."
    )
    language: str | None = Field(None, description=LANGUAGE_DESCRIPTION)
    details: bool | Literal["words", "sentences"] | None = Field(
        None,
        description='Extension: true or "words" adds `words` to each choice (each word of running text with its span, '
        "answer and source), and to a stream's chunk that completes a word its `word` (index and span); "
        "\"sentences\" adds, beside the words, `sentences` to each prompt's first choice, as /generate's "
        "`details.sentences`.",
    )
    context: bool | None = Field(
        None, description="Extension: false reads a heteronym as the lexicon's first entry, whatever its sentence."
    )

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        return _stop_list(value)


class CompletionRequest(SamplingFields):
    """Body of `POST /v1/completions`."""

    prompt: str | list[str] = Field(
        ...,
        description="The input text, or a list of inputs answered in order (each counts as a request).",
        examples=["attention"],
    )
    best_of: int | None = Field(
        None,
        json_schema_extra=documented("best_of"),
        description="Candidates per prompt, at least n; the n best by mean log-probability are returned.",
    )
    logprobs: int | None = Field(
        None,
        json_schema_extra=documented("logprobs"),
        description="Log-probabilities of each token and of the `logprobs` most likely at each step.",
    )
    echo: bool | None = Field(False, description="Only false is supported.")
    suffix: str | None = Field(None, description="Only null is supported.")
    logit_bias: dict[str, float] | None = Field(None, description="Only null or {} is supported.")

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and not all(isinstance(p, str) for p in value):
            raise ValueError("must be a string or a list of strings (token id arrays are not accepted: send the text)")
        if isinstance(value, list) and not value:
            raise ValueError("the list of prompts is empty")
        return value


class ChatMessage(BaseModel):
    model_config = REQUEST_CONFIG

    role: str = Field(..., description="Only `user` is answered.")
    content: Any = Field(..., description="The text (a string, or a list of `text` parts).")


class ChatCompletionRequest(SamplingFields):
    """Body of `POST /v1/chat/completions`: exactly one message of role `user`."""

    messages: list[ChatMessage] = Field(..., description="Exactly one message, of role `user`, with text content.")
    max_completion_tokens: int | None = Field(
        None, json_schema_extra=documented("max_completion_tokens"), description="As max_tokens (newer clients send this one)."
    )
    logprobs: bool | None = Field(False, description="Return each token's log-probability.")
    top_logprobs: int | None = Field(
        None,
        json_schema_extra=documented("top_logprobs"),
        description="With logprobs: the most likely tokens at each step, at most the server's top-n limit.",
    )
    # OpenAI's chat features this model has no use for: accepted only when unset (a 400 names them otherwise)
    tools: list[Any] | None = Field(None, description="Not supported: the model has no tool calling.")
    tool_choice: Any = Field(None, description="Not supported.")
    functions: list[Any] | None = Field(None, description="Not supported.")
    function_call: Any = Field(None, description="Not supported.")
    response_format: Any = Field(None, description="Only text (null or {'type': 'text'}).")
    logit_bias: dict[str, float] | None = Field(None, description="Only null or {} is supported.")


# ---- responses ---------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int = Field(..., description="Source tokens of the prompts (each prompt once).")
    completion_tokens: int = Field(..., description="Tokens generated for the returned choices, end tokens included.")
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None] = Field(..., description="null for a lexicon answer's tokens.")
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int] = Field(..., description="Where each token starts in the choice's text.")


FinishReason = Literal["stop", "length"]


class CompletionChoice(BaseModel):
    index: int = Field(..., description="Prompt i's j-th choice is i * n + j.")
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None = Field(..., description="stop: the end token or a stop sequence; length: max_tokens.")
    words: list[WordDetails] | None = Field(
        None, description="Extension, with `details`: the words of running text, as /generate's `details.words`."
    )
    sentences: list[SentenceDetails] | None = Field(
        None, description="Extension, with `details: \"sentences\"`: the prompt's sentences, as /generate's."
    )
    warnings: list[TextWarning] | None = Field(
        None,
        description="Extension, word-level bundles: its prompt's characters that were skipped, with offsets, as /generate's "
        "`details.warnings`; absent when none were (docs/OPENAI.md).",
    )


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = Field(None, description="On the response; in a stream only on the last chunk, when asked.")


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    logprob: float | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason
    words: list[WordDetails] | None = Field(
        None, description="Extension, with `details`: the words of running text, as /generate's `details.words`."
    )
    sentences: list[SentenceDetails] | None = Field(
        None, description="Extension, with `details: \"sentences\"`: the prompt's sentences, as /generate's."
    )
    warnings: list[TextWarning] | None = Field(
        None,
        description="Extension, word-level bundles: its prompt's characters that were skipped, with offsets, as /generate's "
        "`details.warnings`; absent when none were (docs/OPENAI.md).",
    )


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str = Field(..., description="The served model's name.")
    object: Literal["model"] = "model"
    created: int = Field(..., description="When the server loaded it (Unix seconds).")
    owned_by: str = "attnserve"
    family: str | None = Field(None, description="An imported checkpoint's model family (`marian`, `bart`, `t5`...).")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(BaseModel):
    message: str = Field(..., description="What went wrong and what to change.")
    type: str = Field(..., description="invalid_request_error, authentication_error, rate_limit_error, ...")
    param: str | None = Field(None, description="The request field at fault, when one is.")
    code: str | None = Field(None, description="model_not_found, or the server's error_type (validation, overloaded, ...).")


class OpenAIErrorResponse(BaseModel):
    """The error shape of every /v1 route (OpenAI's)."""

    error: OpenAIErrorDetail
