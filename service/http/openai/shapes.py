"""OpenAI's two answer shapes, whole and streamed: /v1/completions' `text_completion` and /v1/chat/completions'
`chat.completion`, their log-probabilities, and the choice object of each stream chunk (a `Render`,
service/http/openai/streaming.py).
"""

from __future__ import annotations

import orjson

from attnserve.service.http.openai.choices import TokenOut, with_warnings
from attnserve.service.http.openai.completions import Answer, Plan


def completion_logprobs(tokens: list[TokenOut], with_top: bool) -> dict:
    return {
        "tokens": [t.text for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [dict(t.top or []) for t in tokens] if with_top else None,
        "text_offset": [t.offset for t in tokens],
    }


def chat_logprobs(tokens: list[TokenOut]) -> dict:
    def entry(text: str, logprob: float | None) -> dict:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {"content": [{**entry(t.text, t.logprob), "top_logprobs": [entry(x, lp) for x, lp in t.top or []]} for t in tokens]}


def completion_body(answer: Answer, planned: Plan) -> dict:
    return {
        "id": answer.id,
        "object": "text_completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [
            with_warnings(
                {
                    "index": c.index,
                    "text": c.text,
                    "logprobs": completion_logprobs(c.tokens, bool(planned.logprobs)) if planned.logprobs is not None else None,
                    "finish_reason": c.finish_reason,
                },
                c,
            )
            for c in answer.choices
        ],
        "usage": answer.usage(),
    }


def chat_body(answer: Answer, planned: Plan) -> dict:
    return {
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [
            with_warnings(
                {
                    "index": c.index,
                    "message": {"role": "assistant", "content": c.text},
                    "logprobs": chat_logprobs(c.tokens) if planned.logprobs is not None else None,
                    "finish_reason": c.finish_reason,
                },
                c,
            )
            for c in answer.choices
        ],
        "usage": answer.usage(),
    }


class _Chunks:
    """A route's stream chunk choice (a `Render`): the whole dict, and a middle chunk's (no tokens shown, no finish, not
    the first) as `PLAIN` filled in, the bytes orjson gives that dict."""

    PLAIN: bytes  # %d: the index, %b: the text's JSON

    def __init__(self, planned: Plan):
        self.logprobs = planned.logprobs

    def plain(self, index: int, text: str) -> bytes | None:
        return None if self.logprobs is not None else self.PLAIN % (index, orjson.dumps(text))


class CompletionChunks(_Chunks):
    """/v1/completions' stream chunk choice."""

    PLAIN = b'{"index":%d,"text":%b,"logprobs":null,"finish_reason":null}'

    def __call__(self, index: int, text: str, tokens: list[TokenOut], finish: str | None, first: bool) -> dict:
        logprobs = completion_logprobs(tokens, bool(self.logprobs)) if self.logprobs is not None else None
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


class ChatChunks(_Chunks):
    """/v1/chat/completions' stream chunk choice: the first delta carries the role."""

    PLAIN = b'{"index":%d,"delta":{"content":%b},"logprobs":null,"finish_reason":null}'

    def __call__(self, index: int, text: str, tokens: list[TokenOut], finish: str | None, first: bool) -> dict:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        logprobs = chat_logprobs(tokens) if self.logprobs is not None else None
        return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
