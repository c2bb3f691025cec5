"""The internal request every front end builds once, at its edge, and the names its refusals use.

A front end (the TGI routes: service/http/validation.py `tgi_request`; the OpenAI routes:
service/http/openai/completions.py `plan`; the in-process `Generator`: service/client.py `Generator.request`) turns
what its wire format sent into one `Request`, every default resolved:

- `DecodingOptions` (service/engine/options.py): sampling, beams, lengths, each bound checked there (`BOUNDS`);
- `ReadingOptions` (service/text/options.py): how the text is read (lexicon, context, punctuation, date order,
  truncation, pronunciations);
- `OutputOptions` (here): the form of the answer (alphabet, stress, details).

Nothing below the edge reads a wire schema. A refusal (`attnserve.service.errors.InvalidRequest`) names the option
at fault by its internal name (`temperature`, `date_order`, `inputs`); each front end says it in its own words
through one table from these names to its wire names (`say`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from attnserve.service.engine.options import DecodingOptions
from attnserve.service.errors import InvalidRequest
from attnserve.service.text.options import READING_OPTIONS, ReadingOptions


@dataclass(frozen=True)
class OutputOptions:
    """The form a request's answer is written in and what it shows."""

    alphabet: str = "arpabet"  # or "ipa", "espeak" (service/requests/alphabets.py)
    stress: bool = True  # False: no stress digits (ARPAbet) or marks (IPA)
    details: bool = False  # the answer's tokens, finish reason, words...
    words_only: bool = False  # `details: "words"`: the words with their spans, no per-token list
    sentences: bool = False  # `details: "sentences"`: the words, and the sentences they make (service/text/sentences.py)
    decoder_input_details: bool = False  # the decoder's input tokens (the model's own prefill: the model answers)
    return_full_text: bool = False  # the answer's text starts with the input

    @classmethod
    def of(cls, **sent: Any) -> OutputOptions:
        """The options of what a front end was sent, every value None when not sent (its default here)."""
        return cls(**{k: v for k, v in sent.items() if v is not None})


@dataclass(frozen=True)
class Request:
    """One generation request as the request layer reads it: its input and its three sets of options."""

    inputs: str
    decoding: DecodingOptions
    reading: ReadingOptions
    output: OutputOptions


OUTPUT_OPTIONS = tuple(f.name for f in fields(OutputOptions))
# the decoding options a request sets (the others are the engine's own: a front end derives them)
DECODING_OPTIONS = tuple(f.name for f in fields(DecodingOptions) if f.name not in ("logprobs", "token_text"))
# every name a refusal of a generation request may give as its field: the options, and the input
OPTION_NAMES = ("inputs", *DECODING_OPTIONS, *READING_OPTIONS, *OUTPUT_OPTIONS)


def say(e: InvalidRequest, names: Mapping[str, str]) -> tuple[str | None, str]:
    """A refusal in a front end's words: (its field's wire name, its message). `names`: the front end's table from
    internal names to its wire names (a field not in it has no wire name, and is said as it is). A message given whole
    that starts with the field's internal name starts with the wire name instead; any other is `wire: reason`."""
    if e.field is None:
        return None, e.message
    wire = names.get(e.field)
    said = wire or e.field
    if e.whole:
        text = e.message
        return wire, said + text[len(e.field) :] if text.startswith(e.field) else text
    return wire, f"{said}: {e.reason}"


class OptionRefused(InvalidRequest):
    """The engine's refusal of a decoding option (`DecodingOptions`' own checks): its message, given whole, starts
    with the option's name."""

    def __init__(self, message: str, field: str | None):
        super().__init__(message, field, message=message)
