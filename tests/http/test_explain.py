"""decoder.explain.onnx and POST /explain: the weights are the model's, the tokens are the served ones.

The graph's cross-attention is compared with the PyTorch model's own weights
(teacher-forced full forward over the tokens the service generated); the route
is exercised on a real uvicorn server on 127.0.0.1 serving the tiny bundle's
fp32 variant (the explain graph decodes in fp32, so that is where its tokens
must equal /generate's).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
import torch
from service_harness import PacedEngine, ServerThread, metric, scrape

from attnserve.export.checks.explain import attention_parity
from attnserve.export.pipeline.explain import EXPLAIN_DECODER
from attnserve.service.engine.bundle import BundleError, load_bundle, write_bundle_json
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.explain import Explainer
from attnserve.training.model import decoder_self_bias
from attnserve.training.run import load_model

WORDS = ["attention", "cat", "a", "phoneme", "transformer", "supercalifragilistic", "zebra"]


@contextlib.contextmanager
def serving_fp32(bundle_dir: Path, **settings):
    from attnserve.service.http.app import create_app
    from attnserve.service.settings import Settings

    engine = PacedEngine(load_bundle(bundle_dir), variant="fp32", threads=1)
    app = create_app(Settings(bundle=bundle_dir, variant="fp32", threads=1, **settings), engine)
    with ServerThread(app) as server:
        yield server


@pytest.fixture(scope="module")
def server(tiny_bundle_dir):
    with serving_fp32(tiny_bundle_dir) as s:
        yield s


@pytest.fixture(scope="module")
def url(server):
    return server.url


@pytest.fixture(scope="module")
def explainer(tiny_bundle_dir):
    return Explainer(Engine(load_bundle(tiny_bundle_dir), variant="fp32", threads=1))


# ---- the graph --------------------------------------------------------------------------------------
def test_bundle_lists_the_explain_graph_and_the_hot_path_decoder_is_unchanged(tiny_bundle_dir):
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    n = meta["config"]["n_decoder_layers"]
    names = [f"cross_attentions.{i}" for i in range(n)]
    assert meta["explain"]["decoder"] == EXPLAIN_DECODER and meta["explain"]["outputs"] == names
    assert EXPLAIN_DECODER in meta["files"]  # so the loader verifies its sha256
    assert meta["explain"]["parity"]["ok"] is True
    outputs = {o["name"]: o for o in meta["io"]["decoder.explain"]["outputs"]}
    for name in names:
        assert outputs[name]["dtype"] == "float32"
        assert outputs[name]["shape"] == ["B", outputs[name]["shape"][1], "T", "S"]  # [B, H, T, S]
    # same inputs as the served decoder, and the served decoder computes no weights
    assert meta["io"]["decoder.explain"]["inputs"] == meta["io"]["decoder"]["inputs"]
    served = [o.name for o in onnx.load(str(tiny_bundle_dir / "decoder.onnx")).graph.output]
    assert not [o for o in served if o.startswith("cross_attentions")]
    explain = [o.name for o in onnx.load(str(tiny_bundle_dir / EXPLAIN_DECODER)).graph.output]
    assert explain == served + names
    assert not {node.op_type for node in onnx.load(str(tiny_bundle_dir / EXPLAIN_DECODER)).graph.node} & {"If", "Loop"}


def test_explain_graph_weights_are_rows_summing_to_one_equal_to_pytorch(tiny_run_dir, tiny_bundle_dir, explainer):
    """Real words through the served explain loop vs the model's teacher-forced full forward (no cache)."""
    model = load_model(tiny_run_dir)
    engine = explainer.engine
    for word in WORDS:
        ids = engine.encode_text(word)
        x = explainer.explain(ids, DecodingOptions(max_new_tokens=engine.max_target_len))
        a = x.attention  # [L, H, T, S]
        t, s = len(x.token_ids), len(ids)
        assert a.shape == (engine.n_layers, engine.n_heads, t, s)
        assert np.abs(a.sum(-1) - 1.0).max() <= 1e-4  # each output token's weights over the source sum to 1
        assert (a >= 0).all()
        with torch.no_grad():
            src = torch.tensor([ids])
            memory, cross_bias = model.encode(src, torch.ones_like(src))
            fed = torch.tensor([[engine.bos_id, *x.token_ids[:-1]]])  # row t is the step that chose token t
            positions = torch.arange(t)[None, :]
            bias = decoder_self_bias(torch.ones(1, t, dtype=torch.long), t)
            _, _, weights = model.decode(fed, positions, bias, model.cross_kv(memory), cross_bias)
        expected = torch.stack([w[0] for w in weights]).numpy()  # [L, H, T, S]
        diff = float(np.abs(a - expected).max())
        assert diff <= 1e-4, (word, diff)


def test_explain_graph_matches_pytorch_on_a_padded_batch(tiny_run_dir, tiny_bundle_dir):
    """Rows of one step with different source and past lengths (as a batch has): weights and logits equal
    PyTorch's, padded source keys get exactly 0."""
    figures = attention_parity(load_model(tiny_run_dir), tiny_bundle_dir / EXPLAIN_DECODER, b=4, s=9, p=5, seed=1)
    assert figures["ok"], figures
    assert figures["cross_attention_max_abs_diff"] <= 1e-4 and figures["row_sum_max_abs_err"] <= 1e-4
    assert figures["padded_source_max_weight"] == 0.0


def test_a_bundle_whose_explain_graph_is_unlisted_is_refused_with_one_line(tiny_bundle_dir, tmp_path):
    bad = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, bad)
    meta = json.loads((bad / "bundle.json").read_text())
    del meta["files"][EXPLAIN_DECODER]
    write_bundle_json(bad, meta)
    engine = Engine(load_bundle(bad), variant="fp32", threads=1)
    with pytest.raises(BundleError, match=r"decoder\.explain\.onnx is referenced but not listed") as e:
        Explainer.for_engine(engine)
    assert "\n" not in str(e.value)


# ---- the route ---------------------------------------------------------------------------------------
def test_explain_tokens_equal_generate_tokens_for_the_same_request(url):
    with httpx.Client(timeout=60) as c:
        for word in WORDS:
            for params in ({}, {"do_sample": True, "seed": 7}, {"temperature": 0.8, "top_k": 5, "top_p": 0.9, "seed": 11}):
                g = c.post(url + "/generate", json={"inputs": word, "parameters": {**params, "details": True}})
                x = c.post(url + "/explain", json={"inputs": word, "parameters": params})
                assert g.status_code == 200 and x.status_code == 200, (g.text, x.text)
                g, x = g.json(), x.json()
                assert [t["id"] for t in x["tokens"]] == [t["id"] for t in g["details"]["tokens"]], (word, params)
                assert [t["text"] for t in x["tokens"]] == [t["text"] for t in g["details"]["tokens"]]
                assert x["generated_text"] == g["generated_text"]
                assert x["finish_reason"] == g["details"]["finish_reason"]
                assert x["seed"] == g["details"]["seed"] and x["sampled"] == bool(params)
                for a, b in zip(x["tokens"], g["details"]["tokens"]):
                    assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-5)
                    assert a["prob"] == pytest.approx(np.exp(a["logprob"]))


def test_when_int8_serves_explain_tokens_and_logprobs_are_int8s(tiny_bundle_dir):
    """The served variant's logits choose /explain's tokens; the fp32 explain graph only supplies weights."""
    from attnserve.service.http.app import create_app
    from attnserve.service.settings import Settings

    app = create_app(
        Settings(bundle=tiny_bundle_dir, variant="int8", threads=1),
        Engine(load_bundle(tiny_bundle_dir), variant="int8", threads=1),
    )
    fp32 = Explainer(Engine(load_bundle(tiny_bundle_dir), variant="fp32", threads=1))
    fp32_gap = 0.0
    with ServerThread(app) as server, httpx.Client(timeout=60) as c:
        for word in WORDS:
            for params in ({}, {"do_sample": True, "seed": 3}):
                g = c.post(server.url + "/generate", json={"inputs": word, "parameters": {**params, "details": True}}).json()
                x = c.post(server.url + "/explain", json={"inputs": word, "parameters": params}).json()
                assert x["serving_variant"] == "int8"
                assert [t["id"] for t in x["tokens"]] == [t["id"] for t in g["details"]["tokens"]], (word, params)
                for a, b in zip(x["tokens"], g["details"]["tokens"]):
                    assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-5)
                attention = np.array(x["cross_attentions"])
                assert np.abs(attention.sum(-1) - 1).max() <= 1e-4
                if not params:  # greedy: fp32's first token is int8's (same argmax here), its logprob is not
                    own = fp32.explain([t["id"] for t in x["source_tokens"]], DecodingOptions(max_new_tokens=1))
                    if own.token_ids[0] == x["tokens"][0]["id"]:
                        fp32_gap = max(fp32_gap, abs(own.logprobs[0] - x["tokens"][0]["logprob"]))
    assert fp32_gap > 1e-4  # fp32 and int8 logprobs differ: the test can tell which variant chose


def test_explain_answers_attention_per_layer_and_head_and_their_mean(url, tiny_bundle_dir):
    cfg = json.loads((tiny_bundle_dir / "bundle.json").read_text())["config"]
    x = httpx.post(url + "/explain", json={"inputs": "Cat"}, timeout=60).json()
    assert [s["token"] for s in x["source_tokens"]] == ["c", "a", "t"]  # as the model reads it (lower-cased)
    assert x["layers"] == cfg["n_decoder_layers"] and x["heads"] == cfg["n_heads"]
    a = np.array(x["cross_attentions"])
    assert a.shape == (x["layers"], x["heads"], len(x["tokens"]), 3)
    assert np.abs(a.sum(-1) - 1).max() <= 1e-4
    assert np.allclose(np.array(x["cross_attention_mean"]), a.mean(axis=1), atol=1e-6)
    assert x["tokens"][-1]["special"] and x["finish_reason"] == "eos_token"  # the end token has its row too
    assert x["graph"].startswith(EXPLAIN_DECODER) and x["serving_variant"] == "fp32"
    assert "/explain" in httpx.get(url + "/openapi.json", timeout=30).json()["paths"]


BAD_REQUESTS = [
    {},
    {"inputs": ""},
    {"inputs": "   "},
    {"inputs": "\u2603"},  # nothing readable (a character no rule reads is skipped when there are words)
    {"inputs": "cat", "parameters": {"max_new_tokens": 0}},
    {"inputs": "cat", "parameters": {"max_new_tokens": 49}},
    {"inputs": "cat", "parameters": {"temperature": 0}},
    {"inputs": "cat", "parameters": {"top_p": 1.5}},
    {"inputs": "cat", "parameters": {"top_k": -1}},
    {"inputs": "cat", "parameters": {"seed": -1}},
    {"inputs": "cat", "parameters": {"best_of": 9}},
    {"inputs": 5},
    ["cat"],
]


def test_a_word_longer_than_the_model_reads_is_refused_not_read_in_parts(url):
    """/generate answers it in parts; one attention map cannot show parts, so /explain names the length."""
    assert httpx.post(url + "/generate", json={"inputs": "a" * 49}, timeout=60).status_code == 200
    x = httpx.post(url + "/explain", json={"inputs": "a" * 49}, timeout=60)
    assert x.status_code == 422, x.text
    assert x.json()["error_type"] == "validation" and "49 tokens" in x.json()["error"], x.json()


def test_bad_input_gets_the_same_4xx_and_message_as_generate(url):
    with httpx.Client(timeout=60) as c:
        for body in BAD_REQUESTS:
            g = c.post(url + "/generate", json=body)
            x = c.post(url + "/explain", json=body)
            assert 400 <= g.status_code < 500, body
            assert (x.status_code, x.json()) == (g.status_code, g.json()), body
        malformed = {"content": b'{"inputs": "cat"', "headers": {"content-type": "application/json"}}
        g, x = c.post(url + "/generate", **malformed), c.post(url + "/explain", **malformed)
        assert x.status_code == g.status_code == 422 and x.json() == g.json()
        big = {"content": json.dumps({"inputs": "a" * 300_000}).encode(), "headers": {"content-type": "application/json"}}
        assert c.post(url + "/explain", **big).status_code == 413


def test_explain_obeys_auth_timeout_and_counts_in_metrics(tiny_bundle_dir):
    with serving_fp32(tiny_bundle_dir, api_key="s3cret") as s:
        r = httpx.post(s.url + "/explain", json={}, timeout=30)
        assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"  # auth before validation
        ok = httpx.post(s.url + "/explain", json={"inputs": "cat"}, headers={"authorization": "Bearer s3cret"}, timeout=30)
        assert ok.status_code == 200
        bad = httpx.post(s.url + "/explain", json={"inputs": ""}, headers={"authorization": "Bearer s3cret"}, timeout=30)
        assert bad.status_code == 422
        m = scrape(s.url)
        assert metric(m, "attnserve_requests_total", route="/explain", outcome="success") == 1
        assert metric(m, "attnserve_requests_total", route="/explain", outcome="unauthorized") == 1
        assert metric(m, "attnserve_requests_total", route="/explain", outcome="validation") == 1
        assert metric(m, "attnserve_request_duration_seconds_count") >= 1
        assert metric(m, "attnserve_request_generated_tokens_sum") == len(ok.json()["tokens"])
    with serving_fp32(tiny_bundle_dir, request_timeout_s=1e-6) as s:
        r = httpx.post(s.url + "/explain", json={"inputs": "cat"}, timeout=30)
        assert r.status_code == 504 and r.json()["error_type"] == "timeout"
        assert metric(scrape(s.url), "attnserve_requests_total", route="/explain", outcome="timeout") == 1


def test_explain_past_the_request_bound_answers_429_with_retry_after(tiny_bundle_dir):
    """Holding the explainer's lock stands in for a long explain decode in progress."""
    with serving_fp32(tiny_bundle_dir, max_concurrent_requests=1) as s:
        explainer = s.service.explainer
        with ThreadPoolExecutor(1) as pool:
            with explainer._lock:
                first = pool.submit(httpx.post, s.url + "/explain", json={"inputs": "cat"}, timeout=60)
                deadline = time.monotonic() + 30
                while explainer.in_flight < 1 and time.monotonic() < deadline:
                    time.sleep(0.01)
                refused = httpx.post(s.url + "/explain", json={"inputs": "dog"}, timeout=30)
            assert first.result().status_code == 200
        assert refused.status_code == 429 and refused.json()["error_type"] == "overloaded"
        assert int(refused.headers["retry-after"]) >= 1
        assert explainer.in_flight == 0
        # generation requests have their own count: one explain in flight does not refuse them
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200
        assert httpx.post(s.url + "/explain", json={"inputs": "dog"}, timeout=30).status_code == 200


def test_a_bundle_without_the_explain_graph_answers_501_and_still_serves(tiny_bundle_dir, tmp_path):
    old = tmp_path / "old-bundle"
    shutil.copytree(tiny_bundle_dir, old)
    meta = json.loads((old / "bundle.json").read_text())
    del meta["explain"], meta["files"][EXPLAIN_DECODER], meta["io"]["decoder.explain"]
    write_bundle_json(old, meta)
    (old / EXPLAIN_DECODER).unlink()
    with serving_fp32(old) as s:
        r = httpx.post(s.url + "/explain", json={"inputs": "cat"}, timeout=30)
        assert r.status_code == 501
        assert r.json() == {
            "error": "this server's model bundle has no explain graph (decoder.explain.onnx); "
            "rebuild it with attnserve-export build",
            "error_type": "not_implemented",
        }
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200
        assert httpx.get(s.url + "/demo", timeout=30).status_code == 200  # the page shows the 501 text itself


def test_demo_page_and_its_assets_come_from_this_server_only(url):
    page = httpx.get(url + "/demo", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "script-src 'self'" in csp
    for asset in ("demo/static/demo.js", "demo/static/demo.css"):
        assert asset in page.text
        r = httpx.get(f"{url}/{asset}", timeout=30)
        assert r.status_code == 200 and len(r.text) > 500
        assert "http://" not in r.text and "https://" not in r.text  # no CDN, no other origin
    assert "http://" not in page.text and "https://" not in page.text
    # GET / is still TGI's POST / (405 for GET), nothing else is redirected
    assert httpx.get(url + "/", timeout=30).status_code == 405
    assert httpx.get(url + "/demo/static/missing.js", timeout=30).json()["error_type"] == "not_found"


def test_reference_engine_and_explain_choose_the_same_ids_through_the_shared_module(explainer, tiny_run_dir):
    """One copy of token choice: the PyTorch reference, the serving engine and /explain's loop give
    identical ids for greedy, seeded sampling with penalties, and a forced minimum length."""
    from attnserve.training.decode import generate_ids

    engine = explainer.engine
    model = load_model(tiny_run_dir)
    options = [
        DecodingOptions(max_new_tokens=48),
        DecodingOptions(max_new_tokens=48, do_sample=True, seed=7, top_k=5, repetition_penalty=1.2),
        DecodingOptions(max_new_tokens=48, do_sample=True, seed=8, typical_p=0.7, frequency_penalty=0.3),
        DecodingOptions(max_new_tokens=12, min_new_tokens=10),
    ]
    for word in ("attention", "zebra", "phonetics"):
        ids = engine.encode_text(word)
        for opts in options:
            reference = generate_ids(model, [ids], opts, length_bound=engine.bundle.length_bound)[0]
            served = engine.generate([ids], opts)[0].token_ids
            explained = explainer.explain(ids, opts)
            eos = [engine.eos_id] if explained.finish_reason == "eos_token" else []
            assert served == reference, (word, opts)
            assert explained.token_ids == [*reference, *eos], (word, opts)


def test_explain_refuses_n_best_with_a_clear_message(url):
    r = httpx.post(url + "/explain", json={"inputs": "cat", "parameters": {"best_of": 2}}, timeout=30)
    assert r.status_code == 422 and "best_of" in r.json()["error"]
