"""Running text's skipped characters (an emoji, a letter of another script) are reported on every front end, as
/generate's `details.warnings` report them: on the OpenAI routes as each choice's extension field `warnings` (a
whole answer) and as a count in the `x-attnserve-skipped-characters` header (whole or streamed); in the in-process
Generator as `TextResult.warnings`. An answer with nothing skipped is unchanged. Real uvicorn on 127.0.0.1 and the
default bundle."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from service_harness import load_engine, serving

from attnserve.service.client import Generator

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
MODEL = "g2p-en"
TEXT = "Hi 😀 there, Привет friend"
SKIPPED = [("😀", 3, 4), ("Привет", 12, 18)]
HEADER = "x-attnserve-skipped-characters"


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE) as s:
        yield s.url


def spans(warnings: list[dict]) -> list[tuple[str, int, int]]:
    return [(w["text"], w["start"], w["end"]) for w in warnings]


def test_tgi_details_and_openai_choices_report_the_same_warnings(url):
    tgi = httpx.post(url + "/generate", json={"inputs": TEXT, "parameters": {"details": True}}, timeout=60).json()
    assert spans(tgi["details"]["warnings"]) == SKIPPED

    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": [TEXT, "hello"]}, timeout=60)
    assert r.status_code == 200 and r.headers[HEADER] == "2"
    first, second = r.json()["choices"]
    assert first["warnings"] == tgi["details"]["warnings"] and first["text"] == tgi["generated_text"]
    assert "warnings" not in second  # a prompt with nothing skipped: OpenAI's choice, unchanged

    chat = httpx.post(
        url + "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": TEXT}]}, timeout=60
    )
    assert chat.status_code == 200 and chat.headers[HEADER] == "2"
    (choice,) = chat.json()["choices"]
    assert choice["warnings"] == tgi["details"]["warnings"] and all(w["text"] in w["message"] for w in choice["warnings"])


def test_a_stream_names_the_count_in_its_header_and_keeps_openais_chunks(url):
    body = {"model": MODEL, "prompt": TEXT, "stream": True}
    with httpx.Client(timeout=60) as c, c.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.headers[HEADER] == "2"
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]" and not any('"warnings"' in line for line in lines)


def test_nothing_skipped_means_no_header_and_no_field(url):
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hello there"}, timeout=60)
    assert r.status_code == 200 and HEADER not in r.headers and "warnings" not in r.json()["choices"][0]


def test_the_openai_client_reads_the_extension_field(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=TEXT)
    assert raw.headers[HEADER] == "2"
    choice = raw.parse().choices[0]
    assert spans(choice.model_extra["warnings"]) == SKIPPED


def test_the_generator_reports_warnings_in_its_text_result():
    with Generator(DEFAULT_BUNDLE, engine=load_engine(DEFAULT_BUNDLE)) as g:
        skipped, plain = g.generate_text_many([TEXT, "hello there"])
    assert [(w.text, w.start, w.end) for w in skipped.warnings] == SKIPPED
    assert all(TEXT[w.start : w.end] == w.text and w.text in w.message for w in skipped.warnings)
    assert skipped.words == ["hi", "there", "friend"] and plain.warnings == ()
