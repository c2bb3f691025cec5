"""GET /samples and the load tester that uses it: inputs of the served model's own task, a refusal to guess them
from a server without the route, and a non-zero exit with the first failures when a level fails (real server on
127.0.0.1 with the tiny bundle, and a TGI-shaped stub without /samples)."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from fastapi import FastAPI, Request
from service_harness import serving
from test_loadtest import serve

from attnserve.loadtest.cli import main
from attnserve.service.engine.bundle import write_bundle_json


@pytest.fixture(scope="module")
def server(tiny_bundle_dir):
    with serving(tiny_bundle_dir, max_batch_size=8) as s:
        yield s


def run_cli(tmp_path, name, url, *args) -> tuple[int, dict | None]:
    out = tmp_path / name
    rc = main([url, "--out", str(out), "--no-progress", "--no-plots", *args])
    path = out / "results.json"
    return rc, json.loads(path.read_text()) if path.is_file() else None


def test_samples_are_the_bundles_parity_corpus_sources(server, tiny_bundle_dir):
    r = httpx.get(server.url + "/samples", timeout=30)
    assert r.status_code == 200, r.text
    corpus = json.loads((tiny_bundle_dir / "parity_corpus.json").read_text())
    samples = r.json()["samples"]
    # the corpus' sources in its order, less those the server reads otherwise ("a.d.": "a", "d"; "'gain": "gain")
    assert 100 <= len(samples) <= 500 and set(samples) < set(corpus["sources"])
    assert samples == [s for s in corpus["sources"] if s in set(samples)]
    dropped = [s for s in corpus["sources"] if s not in set(samples)]
    assert dropped and all([u.text for u in server.service.requests.units(s, None)] != [s] for s in dropped)
    assert r.json()["source"] == "parity_corpus.json (g2p-tiny)"


def test_a_bundle_without_a_parity_corpus_answers_404(tiny_bundle_dir, tmp_path):
    bundle = tmp_path / "no-corpus"
    shutil.copytree(tiny_bundle_dir, bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    del meta["parity_corpus"]  # written with its manifest_sha256 anew
    write_bundle_json(bundle, meta)
    with serving(bundle) as s:
        r = httpx.get(s.url + "/samples", timeout=30)
    assert r.status_code == 404 and r.json()["error_type"] == "not_found"


def test_loadtest_without_input_sends_the_servers_samples(server, tmp_path):
    samples = httpx.get(server.url + "/samples", timeout=30).json()["samples"]
    rc, result = run_cli(tmp_path, "samples", server.url, "--concurrency", "2", "--requests", "8", "--warmup", "0")
    assert rc == 0
    assert result["config"]["inputs"] == "GET /samples: parity_corpus.json (g2p-tiny)"
    assert result["config"]["n_inputs"] == len(samples)
    s = result["levels"][0]["summary"]
    assert s["ok"] == 8 and s["failed"] == 0


def test_loadtest_refuses_to_start_against_a_server_without_samples(tmp_path, capsys):
    app = FastAPI()
    sent = []

    @app.get("/info")
    async def info():
        return {"model_id": "another-server"}

    @app.post("/generate_stream")
    async def generate_stream(request: Request):
        sent.append(await request.json())
        return {}

    with serve(app) as url:
        rc, result = run_cli(tmp_path, "none", url, "--concurrency", "1", "--requests", "3")
    assert rc == 2 and result is None and sent == []
    err = capsys.readouterr().err
    assert "GET /samples: HTTP 404" in err and "give --input FILE" in err


def test_a_level_with_more_than_one_percent_failed_exits_non_zero_showing_the_first_failures(server, tmp_path, capsys):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("cat\ndog\nfish\n\u2603\u2603\n", encoding="utf-8")  # the snowmen: characters the model cannot read
    args = ("--concurrency", "1", "--requests", "8", "--warmup", "0", "--input", str(inputs))
    rc, result = run_cli(tmp_path, "failing", server.url, *args)
    s = result["levels"][0]["summary"]
    assert s["ok"] == 6 and s["failed"] == 2
    assert rc == 1
    err = capsys.readouterr().err
    assert "level c=1: 2 of 8 requests failed (25.0%, more than 1%)" in err
    assert "request 3: HTTP 422: inputs:" in err and "no words to read" in err  # the server's own message

    rc, _ = run_cli(tmp_path, "tolerated", server.url, *args, "--max-error-rate", "0.25")
    assert rc == 0
