"""attnserve-bench --size: the synthetic model is built at the shape asked for, and the report says which."""

import json

import pytest

from attnserve.export.bench import SIZES, SyntheticSize, main, synthetic_tokenizers


def test_translation_size_is_the_base_transformer_with_an_8000_token_target():
    size = SIZES["translation"]
    assert (size.n_encoder_layers, size.n_decoder_layers, size.d_model, size.n_heads, size.d_ff) == (6, 6, 512, 8, 2048)
    assert synthetic_tokenizers(size)[1].get_vocab_size() == 8000
    assert synthetic_tokenizers(SIZES["default"])[1].get_vocab_size() == 72  # the default model's 68 phonemes + 4 specials


def test_bench_builds_and_reports_the_size_asked_for(monkeypatch, tmp_path):
    # a tiny shape stands in for the translation size (same code path, seconds instead of minutes)
    tiny = SyntheticSize(d_model=32, n_heads=2, d_ff=64, n_encoder_layers=2, n_decoder_layers=1, tgt_tokens=300)
    monkeypatch.setitem(SIZES, "tiny", tiny)
    out = tmp_path / "bench.json"
    args = ["--size", "tiny", "--backends", "ort-int8,ct2-int8", "--lengths", "4", "--batches", "1,2", "--repeats", "1"]
    assert main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["size"] == {"name": "tiny", **tiny.__dict__}
    model = report["model"]
    assert (model["d_model"], model["n_heads"], model["d_ff"]) == (32, 2, 64)
    assert (model["n_encoder_layers"], model["n_decoder_layers"], model["tgt_vocab_size"]) == (2, 1, 300)
    assert report["model_kind"].startswith("synthetic: tiny size")
    assert {(c["backend"], c["batch"]) for c in report["results"]} == {(b, n) for b in ("ort-int8", "ct2-int8") for n in (1, 2)}
    assert all(c["cpu_ms_per_step"] > 0 for c in report["results"])


def test_size_is_for_the_synthetic_model_only(tmp_path):
    # refused before the run is read, so any paths do
    assert main(["--run", str(tmp_path / "run"), "--bundle", str(tmp_path / "bundle"), "--size", "translation"]) == 2
    with pytest.raises(SystemExit) as exit_:
        main(["--size", "huge"])
    assert exit_.value.code == 2
