"""One generation request against a TGI-style or OpenAI-style server, timed: streamed (per token) or not.

Streamed (`/generate_stream`): the server answers Server-Sent Events, one per
generated token: `data:{"index", "token": {"id", "text", "logprob", "special"},
"top_tokens", "generated_text", "details"}`, the last one carrying
`generated_text`. An error after the stream started arrives as an event with an
`error` field.

Not streamed (`/generate`, `--no-stream`): one JSON answer `{"generated_text", ...}`
(TGI's `/` answers a one-element list of it); only its end-to-end latency is
measured, and its token count is TGI's `x-generated-tokens` header.

OpenAI's API (`--api openai`, `/v1/completions`): the same request as OpenAI's completion
`{"model", "prompt", "max_tokens", ...}`. Streamed, the server answers `data: {chunk}` events whose
`choices[0].text` is each token's text, the choice's last with `finish_reason`, then a usage chunk
(`stream_options.include_usage`) and `data: [DONE]`. TTFT is the first chunk with text, the end is the
chunk with `finish_reason`, and the token count is the usage's `completion_tokens` (the chunks with
text when the server sends no usage). Errors come as `{"error": {"message", ...}}`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass

import aiohttp

from attnserve.loadtest.sse import StreamTally

# Error kinds, in report order.
ERROR_KINDS = ("http_429", "http_503", "http_4xx", "http_5xx", "timeout", "connection", "stream")
# Short column names for the summary table, and what each means.
ERROR_KIND_HELP = {
    "http_429": ("429", "overloaded"),
    "http_503": ("503", "draining/unavailable"),
    "http_4xx": ("4xx", "other 4xx"),
    "http_5xx": ("5xx", "5xx but 503"),
    "timeout": ("timeout", "over --timeout"),
    "connection": ("conn", "connection failed"),
    "stream": ("stream", "error event or cut-short stream"),
}


def error_kind_for_status(status: int) -> str:
    if status == 429:
        return "http_429"
    if status == 503:
        return "http_503"
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


@dataclass
class GenerationParams:
    """TGI `parameters`; None means "not sent" (the server's default applies)."""

    max_new_tokens: int | None = None
    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None  # base seed: request i sends seed + i, so a run is reproducible
    # False sends `"lexicon": false`: the model answers every input, so speed figures measure the model
    # path and stay comparable whatever the bundle's lexicon knows (a dictionary lookup costs no decoding)
    lexicon: bool = False

    def payload(self, text: str, index: int) -> dict:
        params: dict = {"do_sample": self.do_sample}
        if not self.lexicon:
            params["lexicon"] = False
        for name in ("max_new_tokens", "temperature", "top_k", "top_p"):
            value = getattr(self, name)
            if value is not None:
                params[name] = value
        if self.seed is not None:
            params["seed"] = self.seed + index
        return {"inputs": text, "parameters": params}

    def openai_payload(self, text: str, index: int, model: str, stream: bool) -> dict:
        """The same request as OpenAI's completion (/v1/completions). Sampling is temperature > 0 there: with
        do_sample and no temperature, temperature 1 is sent. top_k and lexicon are vLLM-style extensions."""
        body: dict = {"model": model, "prompt": text, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if not self.lexicon:
            body["lexicon"] = False
        if self.max_new_tokens is not None:
            body["max_tokens"] = self.max_new_tokens
        if self.do_sample or self.temperature is not None:
            body["temperature"] = self.temperature if self.temperature is not None else 1.0
        for name in ("top_k", "top_p"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.seed is not None:
            body["seed"] = self.seed + index
        return body


@dataclass
class RequestRecord:
    """One request's outcome. Times are seconds; offsets count from the level's start.

    Latencies are measured from `due_s`, the moment the request was meant to be
    sent (open loop: its scheduled arrival), so a client that falls behind
    shows up as latency instead of silently sending less load.
    """

    index: int
    due_s: float
    sent_s: float
    done_s: float
    ok: bool
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0

    @property
    def itl_s(self) -> float | None:
        """genai-perf's inter-token latency: (e2e - ttft) / (output_tokens - 1); None for one token or no TTFT."""
        if not self.ok or self.output_tokens < 2 or self.ttft_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def as_dict(self) -> dict:
        return asdict(self) | {"itl_s": self.itl_s}


def _error_message(body: bytes) -> str:
    """The server's `error` field when the body is the project's error shape, else the text."""
    text = body.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return text[:200]
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):  # OpenAI's shape
        return str(obj["error"].get("message"))[:200]
    if isinstance(obj, dict) and "error" in obj:
        return str(obj["error"])[:200]
    return text[:200]


def open_session(connect_timeout_s: float) -> aiohttp.ClientSession:
    """One HTTP session for a whole run.

    aiohttp because the client shares the machine with the server: it spent
    ~0.4 ms of CPU per streamed request here against ~3 ms for httpx, which made
    the client, not the server, the limit (docs/BENCHMARKS.md). No pool limit:
    closed-loop clients hold one connection each, open-loop arrivals never wait
    for one. Proxy variables are ignored (aiohttp's default): the figures are
    about this server, not a proxy in between. Per-request deadlines come from
    `stream_request`, so the session sets none but the connect one.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
        read_bufsize=1 << 20,  # a long `details` event must still fit one line
    )


async def stream_request(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict,
    headers: dict[str, str],
    *,
    index: int,
    due: float,
    level_start: float,
    timeout_s: float,
    api: str = "tgi",
) -> RequestRecord:
    """POST `payload` to the streaming `url` and time each token event (`api`: "tgi" or "openai", the events' shape).

    `due` and `level_start` are `time.perf_counter()` values. The whole request
    (queueing in the client pool included) must finish within `timeout_s` of `due`.
    """
    sent = time.perf_counter()
    rec = RequestRecord(index=index, due_s=due - level_start, sent_s=sent - level_start, done_s=0.0, ok=False)
    tally = StreamTally(api)  # the events' parser (loadtest/sse.py), shared with the Locust user
    try:
        async with asyncio.timeout(max(0.0, timeout_s - (sent - due))):
            async with client.post(url, json=payload, headers=headers) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    rec.error_kind = error_kind_for_status(resp.status)
                    rec.error = _error_message(await resp.read())
                else:
                    async for raw in resp.content:  # one line at a time
                        if tally.feed(raw, time.perf_counter()):
                            break
                    if tally.failed:
                        error = tally.error
                        rec.error_kind = "stream"
                        rec.error = str(error.get("message") if isinstance(error, dict) else error)[:200]
                    elif tally.final is None:
                        end = "a chunk with finish_reason" if api == "openai" else "the event carrying generated_text"
                        rec.error_kind, rec.error = "stream", f"stream ended before {end}"
    except TimeoutError:  # ours, or aiohttp's connect timeout (a subclass)
        rec.error_kind, rec.error = "timeout", f"no complete answer within {timeout_s:g} s"
    except aiohttp.ClientPayloadError as e:
        rec.error_kind, rec.error = "stream", f"stream cut short: {e}"
    except aiohttp.ClientError as e:  # refused, reset, server disconnected
        rec.error_kind, rec.error = "connection", f"{type(e).__name__}: {e}"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        rec.error_kind, rec.error = "stream", f"event is not JSON: {e}"
    except ValueError as e:  # aiohttp: a line longer than the read buffer
        rec.error_kind, rec.error = "stream", f"unreadable event: {e}"
    rec.done_s = time.perf_counter() - level_start
    rec.output_tokens = tally.output_tokens
    if rec.error_kind is None and tally.first is not None:
        rec.ok = True
        rec.ttft_s = tally.first - due
        rec.e2e_s = tally.final - due
    elif rec.error_kind is None:
        rec.error_kind, rec.error = "stream", "final event arrived without any token"
    return rec


async def generate_request(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict,
    headers: dict[str, str],
    *,
    index: int,
    due: float,
    level_start: float,
    timeout_s: float,
    api: str = "tgi",
) -> RequestRecord:
    """POST `payload` to a non-streaming `url` (`/generate`, or OpenAI's `/v1/completions`) and time the whole answer.

    Nothing arrives before the answer, so TTFT and ITL stay None. The token count
    is the `x-generated-tokens` header (attnserve and TGI send it), else the
    answer's `details.generated_tokens`, else 0. Times as in `stream_request`.
    """
    sent = time.perf_counter()
    rec = RequestRecord(index=index, due_s=due - level_start, sent_s=sent - level_start, done_s=0.0, ok=False)
    try:
        async with asyncio.timeout(max(0.0, timeout_s - (sent - due))):
            async with client.post(url, json=payload, headers=headers) as resp:
                rec.status = resp.status
                body = await resp.read()
                if resp.status != 200:
                    rec.error_kind = error_kind_for_status(resp.status)
                    rec.error = _error_message(body)
                else:
                    answer = json.loads(body)
                    if api == "openai":
                        choices = answer.get("choices") if isinstance(answer, dict) else None
                        if not choices:
                            rec.error_kind, rec.error = "stream", "answer without choices"
                        else:
                            rec.output_tokens = int((answer.get("usage") or {}).get("completion_tokens") or 0)
                    else:
                        if isinstance(answer, list) and len(answer) == 1:  # TGI's POST / answers [answer]
                            answer = answer[0]
                        if not isinstance(answer, dict) or not isinstance(answer.get("generated_text"), str):
                            rec.error_kind, rec.error = "stream", "answer without generated_text"
                        else:
                            header = resp.headers.get("x-generated-tokens", "")
                            details = answer.get("details") or {}
                            rec.output_tokens = int(header) if header.isdigit() else int(details.get("generated_tokens") or 0)
    except TimeoutError:
        rec.error_kind, rec.error = "timeout", f"no complete answer within {timeout_s:g} s"
    except aiohttp.ClientPayloadError as e:
        rec.error_kind, rec.error = "stream", f"answer cut short: {e}"
    except aiohttp.ClientError as e:
        rec.error_kind, rec.error = "connection", f"{type(e).__name__}: {e}"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        rec.error_kind, rec.error = "stream", f"answer is not JSON: {e}"
    now = time.perf_counter()
    rec.done_s = now - level_start
    if rec.error_kind is None:
        rec.ok = True
        rec.e2e_s = now - due
    return rec
