"""attnserve-bench: every backend decodes exactly the forced number of tokens and the report holds ratios."""

import json
import subprocess
import sys

from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.training.decode import generate_ids


def test_min_new_tokens_forces_length_identically_in_engine_and_reference(tiny_bundle_dir, tiny_run_dir):
    from attnserve.training.run import load_model

    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", provider="cpu", threads=1)
    ids = [engine.encode_text(w) for w in ("a", "it", "attention")]
    opts = DecodingOptions(max_new_tokens=20, min_new_tokens=20)
    results = engine.generate(ids, opts, batch_size=3)
    assert [len(r.token_ids) for r in results] == [20, 20, 20]
    assert all(r.finish_reason == "length" for r in results)
    expected = generate_ids(load_model(tiny_run_dir), ids, opts)
    assert [r.token_ids for r in results] == expected


def test_bench_reports_every_backend_and_ratio(tiny_bundle_dir, tiny_run_dir, tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-c", "import sys; from attnserve.export.bench import main; sys.exit(main())"]
    args = ["--run", str(tiny_run_dir), "--bundle", str(tiny_bundle_dir), "--lengths", "4,8", "--batches", "1,3"]
    proc = subprocess.run([*cmd, *args, "--repeats", "1", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["results"]) == 6 * 2 * 2
    assert {c["backend"] for c in report["results"]} == {
        "torch-nocache",
        "torch-cache",
        "ort-fp32",
        "ort-int8",
        "ct2-fp32",
        "ct2-int8",
    }
    for c in report["results"]:
        assert c["tokens_per_s"] > 0 and c["ms_per_step"] > 0
    ratio = next(r for r in report["ratios_tokens_per_s"] if r["batch"] == 3 and r["output_len"] == 8)
    assert set(ratio["vs_torch-nocache"]) == {"torch-cache", "ort-fp32", "ort-int8", "ct2-fp32", "ct2-int8"}
    assert "ort-fp32" in ratio["vs_ct2-fp32"]
    assert report["machine"]["threads_used"] == 1 and report["command"].startswith("attnserve-bench")
    assert "| batch | output len |" in proc.stdout


def test_bench_rejects_lengths_beyond_the_model(tiny_bundle_dir, tiny_run_dir):
    from attnserve.export.bench import main

    assert main(["--run", str(tiny_run_dir), "--bundle", str(tiny_bundle_dir), "--lengths", "4096"]) == 2
    assert main(["--backends", "torch-magic"]) == 2


def test_ctranslate2_copy_of_the_model_decodes_the_same_ids(tiny_run_dir, tmp_path):
    """The speed target is the same model: CTranslate2 built from the state dict agrees with PyTorch."""
    from attnserve.export import ct2
    from attnserve.training.run import load_model, load_run_tokenizers

    model = load_model(tiny_run_dir)
    src_tok, tgt_tok = load_run_tokenizers(tiny_run_dir)
    words = ["attention", "hello", "zebra", "phonetics", "a", "characteristically", "runtime", "onnx"]
    ids = [src_tok.encode(w, add_special_tokens=False).ids for w in words]
    translator = ct2.translator(ct2.convert(model, src_tok, tgt_tok, tmp_path / "ct2"), threads=1)
    expected = [generate_ids(model, [x], DecodingOptions(max_new_tokens=48))[0] for x in ids]
    assert ct2.generate(translator, src_tok, tgt_tok, ids, 48) == expected
    assert [len(x) for x in ct2.generate(translator, src_tok, tgt_tok, ids[:2], 20, min_len=20)] == [20, 20]
