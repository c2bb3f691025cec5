"""The worked example, end to end as docs/TRAINING.md's "Serve your own model" runs it: train
configs/examples/numbers.yaml (number words -> digits, subword targets, short answers) for a few hundred
steps, export it with the parity suite, serve it with `attnserve-serve`, and answer over HTTP and through
the OpenAI route."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from service_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "examples" / "numbers.yaml"
STEPS = 300


def run(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_the_numbers_example_trains_exports_serves_and_answers(tmp_path):
    out, bundle = tmp_path / "run", tmp_path / "numbers"
    sets = [f"max_steps={STEPS}", f"eval_every={STEPS}", f"checkpoint_every={STEPS}", "eval_limit=100", "threads=1"]
    train = run("-m", "attnserve.training", "--config", str(CONFIG), "--out", str(out), *(x for s in sets for x in ("--set", s)))
    assert "WARNING" not in train.stderr  # auto-sized subwords: no vocabulary warning, something learnt
    config = json.loads((out / "config.json").read_text())
    assert config["tgt_tokenizer"] == "bpe" and config["bpe_vocab_size"] == "auto"
    vocab = json.loads((out / "tgt_tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) < 200  # sized from the data, not 8,000

    run("-m", "attnserve.export", "build", str(out), "--out", str(bundle), "--no-fp16", "--threads", "1", "--eval-limit", "100")
    meta = json.loads((bundle / "bundle.json").read_text())
    assert meta["parity"]["passed"] and meta["parity"]["greedy"]["mean_output_len"] < 5  # the old rule refused this

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "attnserve.service", str(bundle), "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read()[-2000:]
            try:
                if httpx.get(url + "/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)

        r = httpx.post(url + "/generate", json={"inputs": "forty-two thousand, one hundred and five"}, timeout=30)
        assert r.status_code == 200, r.text
        answer = r.json()["generated_text"]
        assert answer and answer.isdigit(), answer  # a few hundred steps: digits, not necessarily the right ones

        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)
        completion = client.completions.create(model=meta["model_id"], prompt="forty-two thousand, one hundred and five")
        assert completion.choices[0].text == answer  # the same greedy answer through the OpenAI route
    finally:
        server.terminate()
        server.wait(timeout=30)
