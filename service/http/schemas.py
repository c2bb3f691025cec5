"""Request and response bodies, in Text Generation Inference's (TGI) shapes, so /docs is exact.

What the real clients send (huggingface_hub 0.x sends every parameter, most as
null; 2.x only what was set) must validate: null means unset, and TGI's
parameters this server does not implement are accepted while unset and refused
with a 422 naming them when set to something it cannot honour
(service/requests/validation.py, the one validator). Unknown extra fields are ignored, as TGI does, but kept
(`extra="allow"`) so that a misspelt one is refused and the others are named in a
response header (service/http/fields.py).

The schemas check JSON types only: each number's range is the engine's (service/engine/options.py `BOUNDS`, shown in
/docs from there), checked when the request layer builds the decoding options.

One rule for every parameter, as TGI's router has: a value has its JSON type. A number
is a JSON number (`"max_new_tokens": "5"` is refused, as is 5.0 where an integer is
meant), a boolean is `true` or `false`, and a number is finite (`NaN` and `Infinity`
are not JSON, and are refused wherever a number is read). The request models below are
strict, so FastAPI's routes and the generation routes' handler (service/http/generation.py) both apply it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from attnserve.service.engine.options import BOUNDS
from attnserve.service.http.explain_schemas import FinishReason  # /explain answers in the same terms
from attnserve.service.text.forms import DATE_ORDERS

MAX_STOP_SEQUENCES = 8
# each numeric parameter's range as /docs shows it: the engine's (service/engine/options.py), which checks it
RANGE = {name: bound.json_schema() for name, bound in BOUNDS.items()}


# what a request body's models share: JSON types, not coerced; unknown fields kept to be checked (see above)
REQUEST_CONFIG = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


DateOrder = Literal[DATE_ORDERS]  # the reader's table (service/text/forms.py), its first the default
LANGUAGE_DESCRIPTION = (
    "Extension: the language to read the text in; a word-level bundle reads en-us (also en, en_US), and refuses any "
    "other (a 422 on the TGI routes, a 400 on the OpenAI routes). Null: the bundle's own."
)
NUMBER_AND_DESCRIPTION = (
    'Extension, word-level bundles: true reads numbers with the British "and" (105 one hundred and five, 2005 two '
    "thousand and five); default false: US English, one hundred five (docs/TEXT.md)."
)
DATE_ORDER_DESCRIPTION = (
    f"Extension, word-level bundles: the order of a date written in numbers (`{DATE_ORDERS[0]}` default: 12/25/2023 "
    f"december twenty fifth; {'; '.join(f'`{order}`' for order in DATE_ORDERS[1:])}); docs/TEXT.md."
)


class GenerateParameters(BaseModel):
    """TGI's `parameters`: every field optional; null means unset."""

    model_config = REQUEST_CONFIG

    max_new_tokens: int | None = Field(
        None,
        json_schema_extra=RANGE["max_new_tokens"],
        description="Most tokens to generate (default and ceiling: the server's `max_new_tokens`).",
        examples=[20],
    )
    min_new_tokens: int | None = Field(
        None,
        json_schema_extra=RANGE["min_new_tokens"],
        description="Fewest tokens to generate before the end token may be chosen (null or 0: none); lifts the model's "
        "learned length bound, as transformers' min_new_tokens does.",
    )
    do_sample: bool | None = Field(
        False, description="Sample instead of greedy; also on when temperature, top_k (> 0) or top_p is set."
    )
    temperature: float | None = Field(
        None, json_schema_extra=RANGE["temperature"], description="Softmax temperature (sampling).", examples=[0.8]
    )
    top_k: int | None = Field(
        None, json_schema_extra=RANGE["top_k"], description="Keep the k most likely tokens; 0 or null: off."
    )
    top_p: float | None = Field(
        None, json_schema_extra=RANGE["top_p"], description="Nucleus sampling: keep the smallest set with mass >= top_p."
    )
    repetition_penalty: float | None = Field(
        None,
        json_schema_extra=RANGE["repetition_penalty"],
        description="CTRL's penalty on already generated tokens; 1.0 or null: off.",
    )
    seed: int | None = Field(
        None, json_schema_extra=RANGE["seed"], description="Random seed of a sampled request; the server picks one when absent."
    )
    stop: list[str] | None = Field(
        None,
        max_length=MAX_STOP_SEQUENCES,
        description=f"Stop when the generated text ends with any of these (at most {MAX_STOP_SEQUENCES}).",
    )
    details: bool | Literal["words", "sentences"] | None = Field(
        False,
        description='Return finish reason, token ids, texts and log-probabilities. Extension: `"words"` returns the '
        "words of running text with their spans, answers and sources (`details.words`) without the per-token list, and "
        'on a stream the event that completes a word carries `word`: its index and span; `"sentences"` returns the '
        "words and the sentences they make (`details.sentences`: each one's span, answer and words), one for each "
        "utterance of a TTS voice.",
    )
    return_full_text: bool | None = Field(False, description="Prepend the input to the generated text.")
    truncate: int | None = Field(None, ge=1, description="Keep only the last `truncate` input tokens.")
    best_of: int | None = Field(
        None,
        json_schema_extra=RANGE["best_of"],
        description="n-best: with sampling, N sampled candidates (TGI); without sampling, beam search of width N "
        "(or `num_beams` when larger). The best is `generated_text`, the others are in `details.best_of_sequences`, "
        "ranked by the mean log-probability of their tokens, end token included. Not with streaming. "
        "At most the server's `max_best_of`.",
    )
    num_beams: int | None = Field(
        None,
        json_schema_extra=RANGE["num_beams"],
        description="Extension: beam width when larger than `best_of` (greedy requests only; not with streaming).",
    )
    decoder_input_details: bool | None = Field(
        False, description="Return the decoder's input tokens in `details.prefill` (for this encoder-decoder: the start token)."
    )
    top_n_tokens: int | None = Field(
        None,
        json_schema_extra=RANGE["top_n_tokens"],
        description="The n most likely tokens of every step with their log-probabilities; at most `max_top_n_tokens`.",
    )
    typical_p: float | None = Field(
        None, json_schema_extra=RANGE["typical_p"], description="Typical sampling mass (turns sampling on when < 1)."
    )
    frequency_penalty: float | None = Field(
        None,
        json_schema_extra=RANGE["frequency_penalty"],
        description="Subtract this times a token's count so far from its logit (0 or null: off).",
    )
    presence_penalty: float | None = Field(
        None,
        json_schema_extra=RANGE["presence_penalty"],
        description="Extension (OpenAI's): subtract this from the logit of every token generated so far.",
    )
    lexicon: bool | None = Field(
        None, description="Extension: false asks for the model's own answer even when the bundle's lexicon knows the input."
    )
    punctuation: bool | None = Field(
        None,
        description="Extension, word-level bundles: true keeps sentence and phrase punctuation (. , ; : ! ? ( ) and dashes) "
        "as its own tokens between the words' answers, so a TTS engine can place pauses (docs/TEXT.md). Default: on with "
        "alphabet `espeak` (a Piper voice pauses on the marks), off otherwise.",
    )
    date_order: DateOrder | None = Field(None, description=DATE_ORDER_DESCRIPTION)
    number_and: bool | None = Field(None, description=NUMBER_AND_DESCRIPTION)
    # output forms and per-request pronunciations (service/requests/alphabets.py, service/text/pronunciations.py)
    alphabet: Literal["arpabet", "ipa", "espeak"] | None = Field(
        None,
        description="Extension: `arpabet` (default: the model's own phones), `ipa` (written from them, stress marks "
        "before the stressed syllable) or `espeak` (espeak-ng's en-us IPA, every symbol in Piper's phoneme map, words "
        "joined as Piper's phonemizer joins them; docs/IPA.md). `details.tokens` and streamed tokens are in the same "
        "alphabet.",
    )
    stress: bool | None = Field(None, description="Extension: false leaves out stress (ARPAbet's digits, IPA's marks).")
    pronunciations: dict[str, str] | None = Field(
        None,
        description="Extension: {word or words: phones} for this request only, over the dictionary and the model. A value "
        "is ARPAbet, IPA or espeak-ng's IPA (detected, or said by `pronunciations_alphabet`). Keys match "
        "case-insensitively, but an all-caps key (`US`) matches only all-caps occurrences; a key of several words "
        "(`New York`) matches them one after another and answers them as one word.",
        examples=[{"nguyen": "W IH1 N", "kubernetes": "kˌuːbɚnˈɛɾiz", "New York": "n u ˈj ɔ ɹ k"}],
    )
    pronunciations_alphabet: Literal["arpabet", "ipa", "espeak"] | None = Field(
        None, description="Extension: how every value of `pronunciations` is written; null: each one's is detected."
    )
    language: str | None = Field(None, description=LANGUAGE_DESCRIPTION)
    context: bool | None = Field(
        None,
        description="Extension: false reads a heteronym as the lexicon's first entry, whatever its sentence (default: on "
        "where the bundle has a context component and the server has not turned it off).",
    )
    # TGI parameters accepted for compatibility; a value other than "unset" is refused (service/requests/validation.py).
    watermark: bool | None = Field(False, description="Only false (or null) is supported.")
    grammar: dict[str, Any] | None = Field(None, description="Only null is supported.")
    adapter_id: str | None = Field(None, description="Only null is supported.")


class GenerateRequest(BaseModel):
    """Body of `POST /generate` and `POST /generate_stream`."""

    model_config = REQUEST_CONFIG

    inputs: str = Field(
        ..., description="The input text (an empty or blank one is refused by the request layer).", examples=["attention"]
    )
    parameters: GenerateParameters | None = Field(None, description="Generation parameters (TGI's names).")


class CompatGenerateRequest(GenerateRequest):
    """Body of `POST /` (what huggingface_hub and the text-generation client send)."""

    stream: bool | None = Field(False, description="true: answer Server-Sent Events as /generate_stream does.")


class Token(BaseModel):
    id: int = Field(..., description="Token id.")
    text: str = Field(..., description="Text this token adds (difference of successive decodes; '' for special tokens).")
    logprob: float | None = Field(None, description="Log-probability of the token under the distribution it was chosen from.")
    special: bool = Field(..., description="True for special tokens (end of sequence).")


class PrefillToken(BaseModel):
    id: int
    text: str
    logprob: float | None = None


class BestOfSequence(BaseModel):
    """Another of the n-best answers (TGI's shape, with `score`, `source` and `index` added)."""

    generated_text: str
    finish_reason: FinishReason
    generated_tokens: int = Field(..., description="Tokens generated, the end-of-sequence token included.")
    seed: int | None = Field(
        None, description="The request's seed (sampled candidates); candidate i drew from default_rng([seed, i])."
    )
    prefill: list[PrefillToken] = Field(default_factory=list)
    tokens: list[Token] = Field(default_factory=list)
    top_tokens: list[list[Token]] | None = None
    score: float | None = Field(None, description="Mean log-probability of its generated tokens, end token included.")
    source: Literal["model", "lexicon", "parts"] = Field("model", description="Where the answer came from.")
    index: int | None = Field(None, description="Which sampled candidate (i of best_of) it was; null for beams.")


class WordAlternative(BaseModel):
    """Another answer for one word of running text (best_of), best first."""

    text: str
    source: Literal["model", "lexicon"]
    score: float | None = Field(None, description="The model's mean log-probability; null for a lexicon answer.")


class WordCandidate(BaseModel):
    """A pronunciation the context stage weighed for a heteronym, with its probability in this sentence."""

    text: str
    score: float = Field(..., description="Probability in this sentence (a word alone: its share of the training sentences).")


class WordDetails(BaseModel):
    """One word of running text (word-level bundles): how it was read and how it was answered."""

    word: str = Field(..., description="The word as read: accents and case folded, numbers spelt out.", examples=["two"])
    start: int = Field(..., description='Where in `inputs` it came from: inputs[start:end] ("2" for "two").')
    end: int
    text: str = Field(..., description="Its answer (for G2P, its pronunciation).", examples=["T UW1"])
    source: Literal["model", "lexicon", "punctuation", "context", "parts"] = Field(
        ...,
        description="Where the answer came from; `context`: the lexicon's entry that the sentence chose (a heteronym); "
        "`parts`: a word too long for the model, or whose reading ended early, read in parts (named in `warnings`).",
    )
    score: float | None = Field(None, description="The model's mean log-probability; null for a lexicon answer.")
    guessed: bool = Field(
        False,
        description="A model answer whose score is below the bundle's guess threshold (bundle.json `confidence`, "
        "chosen to flag the worst 10% of its answers on held-out dictionary words): a likely wrong reading, for a "
        "fallback or a check by hand. Always false for the lexicon's answers.",
    )
    candidates: list[WordCandidate] | None = Field(
        None, description="For `context`: the pronunciations it chose among, most probable first, with their probabilities."
    )
    finish_reason: FinishReason
    alternatives: list[WordAlternative] | None = Field(None, description="With best_of: its other answers, best first.")


class SentenceDetails(BaseModel):
    """One sentence of running text (`details: "sentences"`): its span, its answer, and its words."""

    sentence: str = Field(..., description="The sentence as written: inputs[start:end].", examples=["It is 5 p.m."])
    start: int
    end: int
    text: str = Field(..., description="Its answer: its words' answers joined as generated_text joins them.")
    word_start: int = Field(..., description="Its words are details.words[word_start:word_end].")
    word_end: int


class TextWarning(BaseModel):
    """Characters of running text that were not read (an emoji, a letter of another script, a symbol nobody says), or a
    word read in parts (too long for the model, or its reading ended early)."""

    start: int = Field(..., description="Where in `inputs`: inputs[start:end].")
    end: int
    text: str = Field(..., description="The characters skipped.", examples=["\U0001f600"])
    message: str = Field(..., description="What was skipped, or read in parts, and why.")


class Details(BaseModel):
    finish_reason: FinishReason = Field(..., description="Why generation stopped.")
    generated_tokens: int = Field(..., description="Tokens generated, the end-of-sequence token included.")
    seed: int | None = Field(None, description="Seed a sampled request used (null for greedy).")
    prefill: list[PrefillToken] = Field(
        default_factory=list, description="The decoder's input tokens when decoder_input_details."
    )
    tokens: list[Token] | None = Field(default_factory=list, description='The generated tokens (null with `details: "words"`).')
    top_tokens: list[list[Token]] | None = Field(None, description="Per generated token, the top_n_tokens most likely ones.")
    best_of_sequences: list[BestOfSequence] | None = Field(
        None, description="The other n-best answers, best first (best_of > 1)."
    )
    score: float | None = Field(None, description="Extension: mean log-probability of the generated tokens, end token included.")
    source: Literal["model", "lexicon", "context", "parts"] = Field(
        "model",
        description="Extension: where the answer came from; for running text, `lexicon` only when every word's did "
        "(a heteronym chosen by its sentence counts as the lexicon's).",
    )
    words: list[WordDetails] | None = Field(
        None, description="Extension, word-level bundles: per word of the input, as read, its answer and source."
    )
    warnings: list[TextWarning] | None = Field(
        None, description="Extension, word-level bundles: characters of the input that were skipped, with offsets (null: none)."
    )
    sentences: list[SentenceDetails] | None = Field(
        None, description='Extension, word-level bundles with `details: "sentences"`: the sentences of the input, in order.'
    )


class GenerateResponse(BaseModel):
    generated_text: str = Field(..., description="The generated text.", examples=["AH0 T EH1 N SH AH0 N"])
    details: Details | None = Field(None, description="Present when `parameters.details` is true.")


class CompatResponse(GenerateResponse):
    """TGI's `/` answer, with the key of the Hugging Face task an imported checkpoint does (its bundle.json `task`),
    so that huggingface_hub's `InferenceClient.translation` and `.summarization` read their answer."""

    translation_text: str | None = Field(None, description="A translation model's answer: `generated_text` again.")
    summary_text: str | None = Field(None, description="A summarization model's answer: `generated_text` again.")


# bundle.json `task` -> the key huggingface_hub's task clients read on `/`
TASK_KEYS = {"translation": "translation_text", "summarization": "summary_text"}


class StreamDetails(BaseModel):
    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None = None
    input_length: int = Field(..., description="Input length in source tokens.")
    warnings: list[TextWarning] | None = Field(
        None, description="Extension, word-level bundles: characters of the input that were skipped, with offsets (null: none)."
    )


class StreamWord(BaseModel):
    """The word of running text a stream event completes (`details: "words"`)."""

    index: int = Field(..., description="Its index in the non-streamed answer's `details.words`.")
    start: int = Field(..., description="Where in `inputs` it came from: inputs[start:end].")
    end: int


class StreamResponse(BaseModel):
    """One Server-Sent Event of a stream: `data:{...}`; the last one carries `generated_text` and `details`."""

    index: int = Field(..., description="1-based position of this token in the output.")
    token: Token
    top_tokens: list[Token] | None = Field(None, description="This step's top_n_tokens most likely tokens (when asked for).")
    word: StreamWord | None = Field(
        None,
        description='Extension, with `details: "words"` only: on the event whose token completes a word (its end token, or '
        "a kept mark's one token), that word's index and span; absent otherwise.",
    )
    generated_text: str | None = Field(None, description="The full text, on the last event only.")
    details: StreamDetails | None = Field(None, description="On the last event only, when `parameters.details` is true.")


class ErrorResponse(BaseModel):
    """The one error shape of every route."""

    error: str = Field(..., description="What went wrong and what to change.")
    error_type: str = Field(
        ..., description="validation, unauthorized, overloaded, draining, unavailable, timeout, not_found, ..."
    )


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    status: Literal["ready"] = "ready"


class LexiconInfo(BaseModel):
    sources: int = Field(..., description="Entries (distinct sources) in the lexicon.")
    targets: int = Field(..., description="Answers in all (a source may have several, best first).")
    bundle_file: str | None = Field(None, description="The bundle's lexicon file, if it has one.")
    override_file: str | None = Field(None, description="Name of the operator's file (ATTNSERVE_LEXICON), if any.")
    overridden_sources: int = Field(0, description="Sources the operator's file added or replaced.")


class ContextInfo(BaseModel):
    """The bundle's context component as /info shows it."""

    file: str | None = Field(None, description="Its file in the bundle.")
    homographs: int = Field(..., description="Homographs it chooses a reading for.")


class InfoResponse(BaseModel):
    model_id: str = Field(..., description="The bundle's model_id (also the `model` label of every metric).")
    model_sha: str = Field(..., description="sha256 of the bundle's bundle.json: identifies the exact bundle.")
    family: str | None = Field(
        None, description="An imported checkpoint's model family (`marian`, `bart`, `mbart`, `t5`); null for a trained one."
    )
    model_dtype: str = Field(
        ...,
        description="Precision of the served variant's weights: `float32`, `float16` or `int8`. With int8 the activations "
        "differ: they are quantized to 8 bits with fixed scales calibrated at export (a row's answer does not depend on "
        "its batch), and "
        "inputs, outputs and the KV cache stay float32.",
        examples=["int8"],
    )
    variant: str = Field(..., description="Graph variant in use.")
    kv_cache: str = Field(
        ...,
        description="Layout of the served decoder's self-attention cache: `in_place` (contract v2: a fused decoder writes each "
        "row's new position into the row's slot of preallocated buffers, nothing copied per step) or `concat` (v1: each "
        "step's cache is the last one's with one position appended).",
        examples=["in_place"],
    )
    kv_cache_bytes_per_row: int = Field(
        ..., description="Bytes of one row's self-attention cache at max_target_len positions (a v2 slot's size)."
    )
    kv_cache_bytes_at_max_batch_size: int = Field(
        ..., description="kv_cache_bytes_per_row x max_batch_size: the most the decode batch's cache takes."
    )
    provider: str = Field(..., description="ONNX Runtime execution provider actually in use.")
    threads: int = Field(..., description="ONNX Runtime intra-op threads.")
    max_batch_size: int
    max_concurrent_requests: int
    max_input_tokens: int
    max_new_tokens: int
    max_stop_sequences: int = MAX_STOP_SEQUENCES
    max_best_of: int = Field(..., description="Largest best_of / num_beams a request may ask for.")
    max_top_n_tokens: int = Field(..., description="Largest top_n_tokens a request may ask for.")
    word_level_source: bool = Field(
        ..., description="The bundle reads one word at a time, so the server reads running text word by word."
    )
    lexicon: LexiconInfo | None = Field(None, description="The lexicon answering known inputs first; null: none loaded.")
    context: ContextInfo | None = Field(
        None, description="The context component choosing heteronyms by their sentence; null: none loaded, or turned off."
    )
    max_text_chars: int = Field(..., description="Longest running text per request, in characters (word-level bundles).")
    max_words: int = Field(..., description="Most words per request, numbers spelt out (word-level bundles).")
    request_timeout_s: float
    keepalive_timeout_s: float = Field(..., description="Idle HTTP keep-alive connections are closed after this long.")
    stream_interval_ms: float = Field(
        ..., description="A stream's tokens between its first and last are written at most this often (0: each token)."
    )
    version: str = Field(..., description="attnserve version.")
