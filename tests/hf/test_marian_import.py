"""`attnserve-export from-hf` on a Marian built here (random weights, SentencePiece models trained on the spot), then
the bundle served over HTTP on 127.0.0.1: its answers are transformers' `generate` on the same checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

sys.path.insert(0, str(Path(__file__).parent))
from checkpoints import build_marian, sentences  # noqa: E402
from service_harness import serving  # noqa: E402

from attnserve.export.cli import main as export_main  # noqa: E402

pytestmark = pytest.mark.slow
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("marian")
    hf_dir = build_marian(root / "hf")
    bundle = root / "bundle"
    assert export_main(["from-hf", str(hf_dir), "--out", str(bundle), "--parity-sources", "12", "--threads", "1"]) == 0
    return hf_dir, bundle


@pytest.fixture(scope="module")
def hf(imported):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoModelForSeq2SeqLM.from_pretrained(imported[0]).eval(), AutoTokenizer.from_pretrained(imported[0])


def generate(hf, text: str, **kwargs) -> list[int]:
    """transformers' answer after the decoder start, its end token included."""
    import torch

    model, tok = hf
    with torch.no_grad():
        out = model.generate(**tok(text, return_tensors="pt"), do_sample=False, max_new_tokens=NEW_TOKENS, **kwargs)
    return out[0].tolist()[1:]


def test_bundle_records_the_family_rules_and_parity_with_transformers(imported):
    meta = json.loads((imported[1] / "bundle.json").read_text())
    assert meta["family"] == "marian" and meta["parity"]["ok"]
    figures = meta["parity"]["fp32"]
    assert figures["tokenizer_equal"] == "12/12"
    assert figures["greedy"]["equal"] == figures["greedy"]["of"] == 12
    assert figures["beam4"]["equal"] >= 11
    pad = meta["special_ids"]["pad"]
    assert meta["special_ids"]["bos"] == pad  # Marian starts decoding from pad
    assert meta["generation"]["bad_words_ids"] == [[pad]] and meta["generation"]["num_beams"] == 4
    assert meta["source_template"] == {"prefix": [], "suffix": [meta["special_ids"]["eos"]]}
    assert set(meta["variants"]) >= {"fp32"}
    assert ("int8" in meta["variants"]) != ("int8" in meta.get("omitted_variants", {}))


def test_served_greedy_beam_and_completions_equal_transformers(imported, hf):
    sources = sentences(10, seed=77)
    _, tok = hf
    with serving(imported[1], variant="fp32") as server:
        info = httpx.get(f"{server.url}/info").json()
        assert info["family"] == "marian" and info["variant"] == "fp32"
        models = httpx.get(f"{server.url}/v1/models").json()["data"]
        assert models[0]["family"] == "marian"
        for text in sources:
            want = generate(hf, text, num_beams=1)
            body = {"inputs": text, "parameters": {"details": True, "num_beams": 1, "max_new_tokens": NEW_TOKENS}}
            r = httpx.post(f"{server.url}/generate", json=body, timeout=60)
            assert r.status_code == 200, r.text
            tokens = r.json()["details"]["tokens"]
            assert [t["id"] for t in tokens] == want
            assert all(t["special"] == (t["id"] in tok.all_special_ids) for t in tokens)
            body = {"model": models[0]["id"], "prompt": text, "temperature": 0, "max_tokens": NEW_TOKENS}
            r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == tok.decode(want, skip_special_tokens=True)
        # no num_beams: the checkpoint's own search (beam 4), as transformers' generate runs it by default
        agree = 0
        for text in sources:
            body = {"inputs": text, "parameters": {"details": True, "max_new_tokens": NEW_TOKENS}}
            got = [t["id"] for t in httpx.post(f"{server.url}/generate", json=body, timeout=60).json()["details"]["tokens"]]
            agree += got == generate(hf, text)
        assert agree >= 9
