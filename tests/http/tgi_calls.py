"""Shared by the tests/http API tests: TGI request bodies and calls against a running server."""

from __future__ import annotations

import httpx
from service_harness import metric

WORDS = ["attention", "cat", "a", "hello", "phoneme", "transformer", "supercalifragilistic", "data", "zebra", "encoder"]

# What huggingface_hub 0.x sends for text_generation("...") with nothing set: every parameter, most null.
HF_HUB_0X_BODY = {
    "inputs": "attention",
    "parameters": {
        "best_of": None,
        "decoder_input_details": False,
        "details": False,
        "do_sample": False,
        "max_new_tokens": 20,
        "repetition_penalty": None,
        "return_full_text": False,
        "seed": None,
        "stop": [],
        "temperature": None,
        "top_k": None,
        "top_n_tokens": None,
        "top_p": None,
        "truncate": None,
        "typical_p": None,
        "watermark": False,
        "grammar": None,
        "frequency_penalty": None,
        "adapter_id": None,
    },
    "stream": False,
}


def generate(url: str, inputs: str, **parameters) -> dict:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def token_ids(answer: dict) -> list[int]:
    """Generated ids without the end-of-sequence token (the engine's and the reference's convention)."""
    return [t["id"] for t in answer["details"]["tokens"] if not t["special"]]


def batches_larger_than_one(before: dict, after: dict) -> float:
    """Decoder steps between two scrapes that ran with more than one row."""

    def steps_over_one(s: dict) -> float:
        return metric(s, "attnserve_batch_size_count") - metric(s, "attnserve_batch_size_bucket", le="1.0")

    return steps_over_one(after) - steps_over_one(before)
