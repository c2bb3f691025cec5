"""Service settings: one class, CLI flag > `ATTNSERVE_*` environment variable > default.

The names are fixed by ARCHITECTURE.md. `Settings()` reads the environment;
`Settings(**flags)` lets command-line values win (pydantic-settings gives
init arguments the highest priority), which is how `attnserve-serve` builds it.
Each field is declared here once: its flag (`--max-batch-size`), type, choices and
help are made from it (service/cli.py `add_setting_flags`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from attnserve.service.engine.bundle import PACKAGED_BUNDLE
from attnserve.service.engine.runtime import available_cpus
from attnserve.service.text.reader import MAX_TEXT_CHARS, MAX_WORDS

DEFAULT_BUNDLE = Path("models/g2p-en")
ENV_PREFIX = "ATTNSERVE_"
# ATTNSERVE_* names the project itself uses that are not settings of the server: docker compose's own
# (docker-compose*.yml: replicas, their CPUs, the published address and port) and the test suite's.
NOT_SETTINGS = ("ATTNSERVE_REPLICAS", "ATTNSERVE_CPUS_PER_REPLICA", "ATTNSERVE_BIND", "ATTNSERVE_HTTP_PORT")
NOT_SETTINGS_PREFIX = "ATTNSERVE_TEST_"


class ConfigError(ValueError):
    """Settings that cannot work with the bundle being served; one line, stops start-up."""


def default_bundle_candidates() -> list[Path]:
    """Where the default model is looked for: `models/g2p-en` under the working directory, then the one installed
    with the package (`PACKAGED_BUNDLE`, the library's default: inside the wheel, or the checkout's models/ in an
    editable install), so that the commands find it from any directory."""
    if PACKAGED_BUNDLE.resolve() == DEFAULT_BUNDLE.resolve():
        return [DEFAULT_BUNDLE]
    return [DEFAULT_BUNDLE, PACKAGED_BUNDLE]


def resolve_default_bundle() -> Path:
    """The first default bundle directory that exists; an error naming every path tried otherwise."""
    tried = default_bundle_candidates()
    for path in tried:
        if path.is_dir():
            return path
    names = ", ".join(str(p.resolve()) for p in tried)
    raise PydanticCustomError(
        "bundle_not_found",
        "default model bundle not found (tried {tried}); give a bundle directory (argument or --bundle) or set ATTNSERVE_BUNDLE",
        {"tried": names},
    )


class Settings(BaseSettings):
    """Every knob of `attnserve-serve`; each is also `ATTNSERVE_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="forbid", validate_default=True)

    bundle: Path = Field(
        DEFAULT_BUNDLE,
        description="Model bundle directory (bundle.json and its graphs); default: models/g2p-en under the working "
        "directory, else the one installed with the package.",
    )
    variant: str = Field(
        "auto", description="Graph variant from bundle.json `variants`; `auto` takes `default_variant` for the provider."
    )
    provider: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="ONNX Runtime execution provider; `auto` uses CUDA only when a GPU is really present."
    )
    threads: int = Field(
        default_factory=available_cpus,
        ge=1,
        description="ONNX Runtime intra-op threads; default: the CPUs this process may use (cgroup quota included).",
    )
    host: str = Field("127.0.0.1", description="Address to listen on (the container image sets 0.0.0.0).")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on (0: any free port).")
    max_batch_size: int = Field(32, ge=1, description="Most sequences decoded together in one decoder step.")
    max_concurrent_requests: int = Field(
        128, ge=1, description="Bound on queued + running generation requests; past it requests get 429 at once."
    )
    max_input_tokens: int | None = Field(
        None, ge=1, description="Longest input in source tokens; default and ceiling: the bundle's `max_source_len`."
    )
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        description="Largest `max_new_tokens` a request may ask for, and its value when a request does not say; "
        "default and ceiling: what the bundle can generate (`max_target_len`).",
    )
    max_best_of: int = Field(
        4, ge=1, description="Largest best_of / num_beams (n-best answers, beam width) a request may ask for."
    )
    max_top_n_tokens: int = Field(5, ge=0, description="Largest top_n_tokens (alternatives per step) a request may ask for.")
    lexicon: Path | None = Field(
        None,
        description="An operator's lexicon (TSV, `source<TAB>target` per line, best first; blank lines and # comments "
        "allowed): adds entries to the bundle's lexicon, and a source listed here replaces all of the bundle's targets "
        "for it. A bad line stops start-up with FILE:LINE.",
    )
    context: bool = Field(
        True,
        description="Choose a heteronym's pronunciation by its sentence where the bundle has a context component "
        "(`false`: every word reads as the lexicon's first entry, as a bundle without one does).",
    )
    max_text_chars: int = Field(
        MAX_TEXT_CHARS, ge=1, description="Longest running text read in one request, in characters (word-level bundles)."
    )
    max_words: int = Field(
        MAX_WORDS,
        ge=1,
        description="Most words read in one request, counted after numbers are spelt out (word-level bundles).",
    )
    request_timeout_s: float = Field(
        60.0, gt=0, description="A request that waits plus runs longer than this ends with 504 and frees its slot."
    )
    drain_timeout_s: float = Field(
        30.0, ge=0, description="On SIGTERM, how long in-flight requests may take to finish before the process exits."
    )
    keepalive_timeout_s: float = Field(
        75.0,
        gt=0,
        description="How long an idle HTTP keep-alive connection stays open. Longer than any client or proxy in front "
        "keeps its own idle connections (httpx 5 s, aiohttp 15 s, the nginx upstream 60 s): if the server closed first, "
        "a request sent on the connection as it closes would be lost without an answer.",
    )
    stream_interval_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="A stream writes its first and last token at once and those between at most this often, several "
        "events in one write (0: every token as it comes). Each write wakes the event loop, which shares the CPU with "
        "decoding: at sub-millisecond steps, writing every token costs more than the step.",
    )
    api_key: str | None = Field(
        None, description="When set, generation routes require `Authorization: Bearer <key>`; /health and /ready stay open."
    )
    served_model_name: str | None = Field(
        None,
        description="The model's name on the OpenAI-compatible routes (/v1: `model` in requests, GET /v1/models), as "
        "vLLM's --served-model-name; default: the bundle's `model_id`.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level of the JSON logs.")

    @model_validator(mode="before")
    @classmethod
    def _default_bundle(cls, data: Any) -> Any:
        # Only when no flag or ATTNSERVE_BUNDLE named one: a bundle given explicitly is taken as given.
        if isinstance(data, dict) and data.get("bundle") is None:
            data = {**data, "bundle": resolve_default_bundle()}
        return data

    @field_validator("log_level", "provider", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_key", mode="after")
    @classmethod
    def _empty_key_is_none(cls, value: str | None) -> str | None:
        return value or None  # ATTNSERVE_API_KEY= (empty) means auth off, not "the empty key"


def unknown_environment(environ: Mapping[str, str]) -> str | None:
    """One line naming each `ATTNSERVE_*` variable of `environ` that is not a setting (nor one of NOT_SETTINGS),
    with the closest setting's variable; None when there is none. pydantic-settings would ignore it: a typo
    (`ATTNSERVE_MAX_BATH_SIZE`) would leave its setting at the default without a word."""
    known = sorted(ENV_PREFIX + name.upper() for name in Settings.model_fields)
    unknown = [
        key
        for key in sorted(environ)
        if key.upper().startswith(ENV_PREFIX)
        and key.upper() not in known
        and key.upper() not in NOT_SETTINGS
        and not key.upper().startswith(NOT_SETTINGS_PREFIX)
    ]
    if not unknown:
        return None
    names = [k.removeprefix(ENV_PREFIX) for k in known]  # compared without the prefix every one of them shares
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key.upper().removeprefix(ENV_PREFIX), names, n=1, cutoff=0.6)
        named.append(f"{key} (did you mean {ENV_PREFIX}{close[0]}?)" if close else key)
    return (
        f"not a setting: {', '.join(named)}; the ATTNSERVE_* settings are listed in docs/SETTINGS.md "
        "(--allow-unknown-env starts anyway)"
    )
