"""`attnserve-export from-hf` on checkpoints built here (random weights, tokenizers trained on the spot: SentencePiece
for Marian, byte-level BPE in a lone tokenizer.json for BART), then each bundle served over HTTP on 127.0.0.1: its
answers are transformers' `generate` on the same checkpoint, greedy, the checkpoint's own beam search, and
/v1/completions' text."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

sys.path.insert(0, str(Path(__file__).parent))
from checkpoints import build_bart, build_marian, build_t5, sentences  # noqa: E402
from service_harness import serving  # noqa: E402

from attnserve.export.cli import main as export_main  # noqa: E402

pytestmark = pytest.mark.slow
NEW_TOKENS = 12
BUILDERS = {
    "marian": build_marian,
    "bart": build_bart,
    "mbart": lambda out: build_bart(out, mbart=True),  # pre-LN, final LayerNorms, scaled embeddings
    "t5": build_t5,  # v1.1 / Flan: gated GELU, untied head
    "t5-v1.0": lambda out: build_t5(out, v1_1=False),  # ReLU, tied head rescaled
}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def imported(request, tmp_path_factory):
    """(family, checkpoint folder, bundle, transformers model, its tokenizer)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    name = request.param
    family = name.partition("-")[0]
    root = tmp_path_factory.mktemp(name)
    hf_dir = BUILDERS[name](root / "hf")
    bundle = root / "bundle"
    assert export_main(["from-hf", str(hf_dir), "--out", str(bundle), "--parity-sources", "8", "--threads", "1"]) == 0
    model = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    return family, hf_dir, bundle, model, AutoTokenizer.from_pretrained(hf_dir)


def generate(imported, text: str, new_tokens: int = NEW_TOKENS, **kwargs) -> list[int]:
    """transformers' answer after the decoder start, its end token included."""
    import torch

    *_, model, tok = imported
    with torch.no_grad():
        out = model.generate(**tok(text, return_tensors="pt"), do_sample=False, max_length=new_tokens + 1, **kwargs)
    return out[0].tolist()[1:]


def test_bundle_records_the_family_its_rules_and_parity_with_transformers(imported):
    family, _, bundle, model, tok = imported
    meta = json.loads((bundle / "bundle.json").read_text())
    assert meta["family"] == family and meta["parity"]["ok"]
    figures = meta["parity"]["fp32"]
    assert figures["tokenizer_equal"] == "8/8"
    assert figures["greedy"]["equal"] == figures["greedy"]["of"] == 8
    assert figures["beam4"]["equal"] >= 8 * 0.9
    gen = model.generation_config
    assert meta["special_ids"]["bos"] == gen.decoder_start_token_id
    assert meta["generation"]["num_beams"] == (gen.num_beams or 1) and meta["generation"]["max_length"] == gen.max_length
    assert set(meta["special_tokens"]) == set(tok.all_special_ids)
    template = meta["source_template"]
    assert [*template["prefix"], *template["suffix"]] == [i for i in tok("a").input_ids if i in tok.all_special_ids]
    if family == "marian":
        assert meta["generation"]["bad_words_ids"] == [[meta["special_ids"]["pad"]]]
    elif family in ("bart", "mbart"):
        assert meta["generation"]["no_repeat_ngram_size"] == 3 and meta["generation"]["forced_bos_token_id"] == 0
    else:  # T5's 100 sentinels are special
        assert len(meta["special_tokens"]) == 103
    assert ("int8" in meta["variants"]) != ("int8" in meta.get("omitted_variants", {}))


def test_continuous_batching_answers_as_transformers(imported):
    """Rows that join a running batch (different past and source lengths in one step) answer as each alone."""
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import Engine
    from attnserve.service.engine.options import DecodingOptions

    engine = Engine(load_bundle(imported[2]), variant="fp32", provider="cpu", threads=1)
    sources = sentences(8, seed=5)
    options = [DecodingOptions(max_new_tokens=NEW_TOKENS - (i % 5)) for i in range(len(sources))]
    results = engine.generate(sources, options, batch_size=3, refill=True, sort=False)
    for text, opts, r in zip(sources, options, results):
        want = generate(imported, text, opts.max_new_tokens, num_beams=1)
        got = [*r.token_ids, *([engine.eos_id] if r.finish_reason == "eos_token" else [])]
        assert got == want


def test_a_minimum_length_masks_the_end_token_as_transformers_does(imported):
    """min_new_tokens on an imported checkpoint is transformers' MinNewTokensLength: the end token's log-probability
    set to -inf before that many tokens, the others left as they are (not renormalised), so beam search scores its
    candidates as transformers' generate does, and greedy takes the same argmax."""
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import Engine
    from attnserve.service.engine.options import DecodingOptions

    engine = Engine(load_bundle(imported[2]), variant="fp32", provider="cpu", threads=1)
    sources = sentences(6, seed=21)
    for beams in (None, 4):
        options = DecodingOptions(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS - 4, num_beams=beams)
        results = engine.generate(sources, options, batch_size=8)
        same = 0
        for text, r in zip(sources, results):
            got = [*r.token_ids, *([engine.eos_id] if r.finish_reason == "eos_token" else [])]
            same += got == generate(imported, text, num_beams=beams or 1, min_new_tokens=NEW_TOKENS - 4)
        assert same == len(sources), (beams, same)


def test_served_greedy_beam_and_completions_equal_transformers(imported):
    family, _, bundle, _, tok = imported
    sources = sentences(8, seed=77)
    with serving(bundle, variant="fp32") as server:
        info = httpx.get(f"{server.url}/info").json()
        assert info["family"] == family and info["variant"] == "fp32"
        models = httpx.get(f"{server.url}/v1/models").json()["data"]
        assert models[0]["family"] == family
        samples = httpx.get(f"{server.url}/samples").json()["samples"]  # what a load test sends by default
        proved_on = json.loads((bundle / "parity_corpus.json").read_text())["sources"]
        assert samples and set(samples) <= set(proved_on)
        for text in sources:
            want = generate(imported, text, num_beams=1)
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
        # no num_beams: the checkpoint's own search (beam 4, its length penalty), as its generate runs by default
        agree = 0
        for text in sources:
            body = {"inputs": text, "parameters": {"details": True, "max_new_tokens": NEW_TOKENS}}
            r = httpx.post(f"{server.url}/generate", json=body, timeout=60)
            agree += [t["id"] for t in r.json()["details"]["tokens"]] == generate(imported, text)
        assert agree >= 7
