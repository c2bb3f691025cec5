"""TGI's `/` answers an imported translation model in the shape huggingface_hub's `InferenceClient.translation`
reads (`translation_text`), beside `generated_text`; a model of no such task answers without the key."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from checkpoints import build_marian, sentences  # noqa: E402
from service_harness import serving  # noqa: E402

from attnserve.export.cli import main as export_main  # noqa: E402

pytestmark = pytest.mark.slow
DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


def test_translation_client_reads_the_answer_of_an_imported_marian(tmp_path):
    from huggingface_hub import InferenceClient

    hf_dir = build_marian(tmp_path / "hf")
    bundle = tmp_path / "bundle"
    assert export_main(["from-hf", str(hf_dir), "--out", str(bundle), "--parity-sources", "8", "--threads", "1"]) == 0
    text = sentences(1, seed=5)[0]
    with serving(bundle, variant="fp32") as server:
        (raw,) = httpx.post(server.url + "/", json={"inputs": text}, timeout=60).json()
        assert raw["translation_text"] == raw["generated_text"] and "summary_text" not in raw
        answer = InferenceClient(model=server.url).translation(text)
    assert answer.translation_text == raw["generated_text"]


def test_a_model_of_no_hugging_face_task_answers_without_a_task_key():
    with serving(DEFAULT_BUNDLE) as server:
        (raw,) = httpx.post(server.url + "/", json={"inputs": "hello"}, timeout=60).json()
    assert raw["generated_text"] and not {"translation_text", "summary_text"} & set(raw)
