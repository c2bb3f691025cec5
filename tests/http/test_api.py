"""The HTTP API against a real uvicorn server on 127.0.0.1 serving the tiny bundle.

One server is shared by the module; tests that need other settings (a tight
bound, a short timeout, an API key, a failing engine, fresh counters) start
their own, which costs about a second each.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from service_harness import metric, scrape, serving, sse_events, stream

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


@pytest.fixture(scope="module")
def server(tiny_bundle_dir):
    with serving(tiny_bundle_dir, max_batch_size=8, max_concurrent_requests=64) as s:
        yield s


@pytest.fixture(scope="module")
def url(server) -> str:
    return server.url


@pytest.fixture()
def paced(server):
    """Slow each decoder step of the shared server for one test, so requests overlap for sure."""

    def set_delay(seconds: float) -> None:
        server.service.engine.step_delay_s = seconds

    yield set_delay
    server.service.engine.step_delay_s = 0.0


def generate(url: str, inputs: str, **parameters) -> dict:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def token_ids(answer: dict) -> list[int]:
    """Generated ids without the end-of-sequence token (the engine's and the reference's convention)."""
    return [t["id"] for t in answer["details"]["tokens"] if not t["special"]]


# ---- TGI clients ------------------------------------------------------------------------------
def test_inference_client_plain_details_and_stream_work_unchanged(url):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=url)
    expected = generate(url, "attention")["generated_text"]

    assert client.text_generation("attention", max_new_tokens=30) == expected

    out = client.text_generation("attention", max_new_tokens=30, details=True)
    assert out.generated_text == expected
    assert out.details.finish_reason in ("eos_token", "length")
    assert out.details.generated_tokens == len(out.details.tokens)
    assert all(isinstance(t.logprob, float) and t.logprob <= 0 for t in out.details.tokens)
    # details show each token's text (decoded as it is chosen only where shown): together they are the answer
    assert "".join(t.text for t in out.details.tokens if not t.special) == expected

    assert "".join(client.text_generation("attention", max_new_tokens=30, stream=True)) == expected

    events = list(client.text_generation("attention", max_new_tokens=30, stream=True, details=True))
    assert events[-1].generated_text == expected
    assert events[-1].details.finish_reason == out.details.finish_reason
    assert [e.index for e in events] == list(range(1, len(events) + 1))

    sampled = client.text_generation("attention", max_new_tokens=30, do_sample=True, seed=11, details=True)
    assert sampled.details.seed == 11


def test_replayed_hf_hub_0x_body_with_nulls_succeeds(url):
    r = httpx.post(url + "/", json=HF_HUB_0X_BODY, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, list) and len(body) == 1
    assert body[0]["generated_text"] == generate(url, "attention", max_new_tokens=20)["generated_text"]
    assert body[0]["details"] is None

    streamed = dict(HF_HUB_0X_BODY, stream=True)
    status, events = stream(url + "/", streamed)
    assert status == 200
    assert events[-1]["generated_text"] == body[0]["generated_text"]


def test_unsupported_tgi_parameters_are_refused_only_when_set(url):
    for name, value in [("watermark", True), ("grammar", {"type": "json"}), ("adapter_id", "lora")]:
        r = httpx.post(url + "/generate", json={"inputs": "cat", "parameters": {name: value}}, timeout=30)
        assert r.status_code == 422, (name, r.text)
        assert r.json()["error_type"] == "validation"
        assert name in r.json()["error"]
    r = httpx.post(url + "/generate", json={"inputs": "cat", "parameters": {"best_of": 1, "top_n_tokens": 0}}, timeout=30)
    assert r.status_code == 200


# ---- n-best, alternatives and TGI's other parameters ---------------------------------------------
def test_inference_client_gets_three_distinct_hypotheses_sorted_by_score(url):
    from huggingface_hub import InferenceClient

    out = InferenceClient(base_url=url).text_generation("attention", best_of=3, details=True, max_new_tokens=30)
    others = out.details.best_of_sequences
    texts = [out.generated_text, *(b.generated_text for b in others)]
    assert len(others) == 2 and len(set(texts)) == 3
    raw = generate(url, "attention", best_of=3, max_new_tokens=30)["details"]
    scores = [raw["score"], *(b["score"] for b in raw["best_of_sequences"])]
    assert scores == sorted(scores, reverse=True)
    assert [raw["best_of_sequences"][i]["generated_text"] for i in range(2)] == texts[1:]
    # the score is the mean raw log-probability of the tokens, the end token included
    assert raw["score"] == pytest.approx(sum(t["logprob"] for t in raw["tokens"]) / len(raw["tokens"]), abs=1e-9)
    assert raw["generated_tokens"] == len(raw["tokens"]) and raw["source"] == "model"


def test_best_of_with_sampling_is_seeded_and_reproducible(url):
    first = generate(url, "phoneme", best_of=3, do_sample=True, seed=42, temperature=1.5)
    again = generate(url, "phoneme", best_of=3, do_sample=True, seed=42, temperature=1.5)
    assert first == again
    seqs = first["details"]["best_of_sequences"]
    assert first["details"]["seed"] == 42 and all(b["seed"] == 42 for b in seqs)
    assert {b["index"] for b in seqs} < {0, 1, 2}
    scores = [first["details"]["score"], *(b["score"] for b in seqs)]
    assert scores == sorted(scores, reverse=True)


def test_top_n_tokens_gives_alternatives_per_step_in_details_and_stream(url):
    answer = generate(url, "attention", top_n_tokens=3)
    top = answer["details"]["top_tokens"]
    assert len(top) == len(answer["details"]["tokens"])
    for step, chosen in zip(top, answer["details"]["tokens"]):
        assert len(step) == 3
        assert [t["logprob"] for t in step] == sorted((t["logprob"] for t in step), reverse=True)
        assert chosen["id"] == step[0]["id"]  # greedy: the chosen token is the most likely one
        assert chosen["logprob"] == pytest.approx(step[0]["logprob"])
    status, events = stream(url + "/generate_stream", {"inputs": "attention", "parameters": {"top_n_tokens": 2}})
    assert status == 200 and all(len(e["top_tokens"]) == 2 for e in events)


def test_typical_p_frequency_penalty_and_decoder_input_details_are_honoured(url):
    typical = generate(url, "transformer", typical_p=0.5, seed=3)
    assert typical["details"]["seed"] == 3  # typical_p turns sampling on, as TGI
    assert typical == generate(url, "transformer", typical_p=0.5, seed=3)
    plain = generate(url, "supercalifragilistic", max_new_tokens=30)
    penalised = generate(url, "supercalifragilistic", max_new_tokens=30, frequency_penalty=2.0)
    assert token_ids(penalised) != token_ids(plain)
    prefill = generate(url, "cat", decoder_input_details=True)["details"]["prefill"]
    assert len(prefill) == 1 and prefill[0]["logprob"] is None


@pytest.mark.parametrize(
    "parameters, fragment",
    [
        ({"best_of": 5}, "best_of must be at most 4"),
        ({"num_beams": 9}, "num_beams must be at most 4"),
        ({"best_of": 0}, "best_of"),
        ({"num_beams": 3, "do_sample": True}, "num_beams"),
        ({"top_n_tokens": 6}, "top_n_tokens must be at most 5"),
        ({"typical_p": 0}, "typical_p"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
    ],
)
def test_bad_n_best_and_alternative_parameters_get_422_naming_them(url, parameters, fragment):
    r = httpx.post(url + "/generate", json={"inputs": "cat", "parameters": parameters}, timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["error_type"] == "validation" and fragment in r.json()["error"]


def test_best_of_and_beam_search_cannot_be_streamed(url):
    for parameters in ({"best_of": 2}, {"num_beams": 2}, {"best_of": 2, "do_sample": True}):
        r = httpx.post(url + "/generate_stream", json={"inputs": "cat", "parameters": parameters}, timeout=30)
        assert r.status_code == 422 and "cannot be streamed" in r.json()["error"], r.text


def test_info_shows_the_n_best_limits(url):
    info = httpx.get(url + "/info", timeout=10).json()
    assert info["max_best_of"] == 4 and info["max_top_n_tokens"] == 5


# ---- outputs ----------------------------------------------------------------------------------
def test_greedy_output_equals_the_pytorch_reference(url, tiny_run_dir, tiny_bundle_dir):
    from service.engine.bundle import load_bundle
    from service.engine.engine import DecodingOptions
    from training.decode import generate_ids
    from training.run import load_model, load_run_tokenizers

    model = load_model(tiny_run_dir).eval()
    src_tok, _ = load_run_tokenizers(tiny_run_dir)
    bound = load_bundle(tiny_bundle_dir).length_bound  # the server stops a row at its bundle's length bound
    for word in WORDS:
        ids = src_tok.encode(word, add_special_tokens=False).ids
        expected = generate_ids(model, [ids], DecodingOptions(max_new_tokens=48), length_bound=bound)[0]
        assert token_ids(generate(url, word, max_new_tokens=48)) == expected, word


def test_same_seed_reproduces_alone_and_inside_a_busy_batch(url, paced):
    params = {"do_sample": True, "seed": 1234, "temperature": 1.5, "max_new_tokens": 40}
    alone = generate(url, "transformer", **params)
    assert alone["details"]["seed"] == 1234

    paced(0.01)
    before = scrape(url)
    with ThreadPoolExecutor(9) as pool:
        noise = [pool.submit(generate, url, w, do_sample=True, max_new_tokens=40) for w in WORDS[:8]]
        time.sleep(0.03)  # the seeded request joins a batch that is already running
        busy = pool.submit(generate, url, "transformer", **params).result()
        [f.result() for f in noise]
    after = scrape(url)
    assert busy["generated_text"] == alone["generated_text"]
    assert token_ids(busy) == token_ids(alone)
    assert batches_larger_than_one(before, after) > 0


def test_different_seeds_give_different_outputs(url):
    outputs = {generate(url, "transformer", do_sample=True, temperature=2.0, seed=s)["generated_text"] for s in range(6)}
    assert len(outputs) > 1


def test_no_seed_means_the_server_picks_one_and_returns_it(url):
    a = generate(url, "transformer", do_sample=True, temperature=2.0)
    assert isinstance(a["details"]["seed"], int)
    b = generate(url, "transformer", do_sample=True, temperature=2.0, seed=a["details"]["seed"])
    assert b["generated_text"] == a["generated_text"]
    assert generate(url, "transformer")["details"]["seed"] is None  # greedy: no seed, as TGI


def test_answered_requests_leave_no_reference_cycles_for_the_collector(url):
    """A request's state (its generation and rows, its ticket, a stream's keep-alive timer) is freed by
    reference counting once answered. Left in cycles, it waited for the cyclic collector, whose collections
    took about 9% of a busy event loop's CPU."""
    import gc
    from collections import Counter

    def ours(o) -> bool:
        module = getattr(o, "__module__", None) if callable(o) and not isinstance(o, type) else type(o).__module__
        return isinstance(module, str) and module.startswith("service.")

    bodies = [
        ("/generate", {"inputs": "attention", "parameters": {"details": True}}),
        ("/generate", {"inputs": "cat", "parameters": {"do_sample": True, "seed": 1, "best_of": 2}}),
        ("/generate", {"inputs": "hello", "parameters": {"num_beams": 3}}),
        ("/generate_stream", {"inputs": "zebra", "parameters": {"max_new_tokens": 5}}),
        ("/", {"inputs": "data", "stream": True}),
    ]
    with httpx.Client(timeout=60) as client:
        for route, body in bodies:  # once first: what a server builds on its first requests is not per request
            assert client.post(url + route, json=body).status_code == 200
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, not freed
        try:
            for _ in range(3):
                for route, body in bodies:
                    assert client.post(url + route, json=body).status_code == 200
            time.sleep(0.2)  # the server's bookkeeping after the answer
            gc.collect()
            cyclic = Counter(type(o).__qualname__ for o in gc.garbage if ours(o))
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert not cyclic, f"request state left in reference cycles: {dict(cyclic)}"


def test_concatenated_stream_equals_generate_text(url):
    for word in WORDS[:5]:
        expected = generate(url, word)
        status, events = stream(url + "/generate_stream", {"inputs": word, "parameters": {"details": True}})
        assert status == 200
        assert "".join(e["token"]["text"] for e in events) == expected["generated_text"]
        assert events[-1]["generated_text"] == expected["generated_text"]
        assert all(e["generated_text"] is None for e in events[:-1])
        assert [e["token"]["id"] for e in events] == [t["id"] for t in expected["details"]["tokens"]]
        assert events[-1]["details"]["generated_tokens"] == expected["details"]["generated_tokens"]


def test_return_full_text_and_stop_sequences(url):
    full = generate(url, "attention")["generated_text"]
    assert generate(url, "attention", return_full_text=True)["generated_text"] == "attention" + full
    stop = full.split()[1]
    cut = generate(url, "attention", stop=[stop])
    assert cut["details"]["finish_reason"] == "stop_sequence"
    assert cut["generated_text"].endswith(stop) and full.startswith(cut["generated_text"])


def test_truncate_keeps_the_last_input_tokens(url):
    assert generate(url, "zzzzzzattention", truncate=9)["generated_text"] == generate(url, "attention")["generated_text"]


# ---- batching ---------------------------------------------------------------------------------
def batches_larger_than_one(before: dict, after: dict) -> float:
    """Decoder steps between two scrapes that ran with more than one row."""

    def steps_over_one(s: dict) -> float:
        return metric(s, "attnserve_batch_size_count") - metric(s, "attnserve_batch_size_bucket", le="1.0")

    return steps_over_one(after) - steps_over_one(before)


def test_concurrent_mixed_lengths_match_one_by_one_and_batch(url, paced):
    words = WORDS * 2
    one_by_one = [token_ids(generate(url, w)) for w in words]
    paced(0.005)
    before = scrape(url)
    with ThreadPoolExecutor(len(words)) as pool:
        together = list(pool.map(lambda w: token_ids(generate(url, w)), words))
    after = scrape(url)
    assert together == one_by_one
    assert batches_larger_than_one(before, after) > 0


def test_int8_served_by_default_answers_under_load_as_alone(tiny_int8_bundle_dir):
    """The default model serves int8 on CPU: 60 words (dictionary and pseudo-words), greedy and
    seeded sampling, answer exactly as they do alone when sent by 16 concurrent clients."""
    import random

    rng = random.Random(3)
    words = WORDS + ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 12))) for _ in range(50)]
    with serving(tiny_int8_bundle_dir, max_batch_size=16, max_concurrent_requests=64) as server:
        assert server.service.engine.variant == "int8"
        for params in ({}, {"do_sample": True, "seed": 11, "temperature": 1.3}):
            alone = [token_ids(generate(server.url, w, **params)) for w in words]
            server.service.engine.step_delay_s = 0.002
            before = scrape(server.url)
            with ThreadPoolExecutor(16) as pool:
                together = list(pool.map(lambda w, p=params: token_ids(generate(server.url, w, **p)), words))
            server.service.engine.step_delay_s = 0.0
            assert together == alone, params
            assert batches_larger_than_one(before, scrape(server.url)) > 0


def test_short_request_sent_while_a_long_one_runs_finishes_first(url, paced):
    paced(0.03)
    done = {}
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", url + "/generate_stream", json={"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}
        ) as long_stream,
    ):
        events = sse_events(long_stream.iter_lines())
        first = next(e for e in events if e != "keep-alive")
        assert first["generated_text"] is None  # the long request is running

        def short() -> None:
            generate(url, "a", max_new_tokens=1)
            done["short"] = time.perf_counter()

        t = threading.Thread(target=short)
        t.start()
        for e in events:
            if e != "keep-alive" and e["generated_text"] is not None:
                done["long"] = time.perf_counter()
        t.join()
    assert done["short"] < done["long"]


def test_keep_alive_comments_on_a_quiet_stream(server, url, paced):
    paced(0.05)
    server.service.keepalive_s = 0.01
    try:
        with httpx.stream("POST", url + "/generate_stream", json={"inputs": "attention"}, timeout=60) as r:
            lines = list(r.iter_lines())
    finally:
        server.service.keepalive_s = 15.0
    assert ": keep-alive" in lines
    events = [e for e in sse_events(iter(lines)) if e != "keep-alive"]
    assert events[-1]["generated_text"] == generate(url, "attention")["generated_text"]


# ---- bad input --------------------------------------------------------------------------------
BAD_REQUESTS = [
    ({}, "inputs: is required"),
    ({"inputs": ""}, "inputs"),
    ({"inputs": "   "}, "empty"),
    ({"inputs": "a" * 49}, "49 tokens"),
    ({"inputs": "\u2603 \U0001f600"}, "'\u2603'"),  # nothing readable: a text with words skips these, with warnings
    ({"inputs": "cat", "parameters": {"max_new_tokens": 0}}, "max_new_tokens"),
    ({"inputs": "cat", "parameters": {"max_new_tokens": 49}}, "between 1 and 48"),
    ({"inputs": "cat", "parameters": {"do_sample": True, "temperature": 0}}, "temperature must be > 0"),
    ({"inputs": "cat", "parameters": {"temperature": -1.0}}, "temperature must be > 0"),
    ({"inputs": "cat", "parameters": {"top_p": 0}}, "top_p"),
    ({"inputs": "cat", "parameters": {"top_p": 1.5}}, "top_p"),
    ({"inputs": "cat", "parameters": {"top_k": -1}}, "top_k"),
    ({"inputs": "cat", "parameters": {"seed": -1}}, "seed"),
    ({"inputs": "cat", "parameters": {"repetition_penalty": 0}}, "repetition_penalty"),
    ({"inputs": 5}, "inputs"),
    ({"inputs": "cat", "parameters": "fast"}, "parameters"),
    ({"inputs": "cat", "parameters": {"max_new_tokens": "many"}}, "max_new_tokens"),
    ({"inputs": "cat", "parameters": {"stop": "N"}}, "stop"),
    (["cat"], "JSON object"),
]


@pytest.mark.parametrize("route", ["/generate", "/generate_stream", "/"])
def test_every_bad_input_gets_422_with_a_message(url, route):
    for body, needle in BAD_REQUESTS:
        r = httpx.post(url + route, json=body, timeout=30)
        assert r.status_code == 422, (body, r.status_code, r.text)
        err = r.json()
        assert set(err) == {"error", "error_type"}, err
        assert err["error_type"] == "validation"
        assert needle in err["error"], (body, err)


def test_too_long_input_names_the_limit_and_the_length(url):
    err = httpx.post(url + "/generate", json={"inputs": "a" * 60}, timeout=30).json()["error"]
    assert "60" in err and "48" in err


def test_malformed_json_wrong_content_and_oversized_bodies(url):
    r = httpx.post(url + "/generate", content=b'{"inputs": "cat"', headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 422 and "not valid JSON" in r.json()["error"]

    before = metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="validation")
    big = json.dumps({"inputs": "a" * 300_000}).encode()
    r = httpx.post(url + "/generate", content=big, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413
    assert r.json()["error_type"] == "validation" and "larger than" in r.json()["error"]

    def chunks():
        for _ in range(40):
            yield b"a" * 10_000

    r = httpx.post(url + "/generate", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413  # no Content-Length: counted as it arrives
    # both 413s are counted, though they never reach a route handler
    assert metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="validation") - before == 2


def test_unknown_routes_and_methods_use_the_error_shape(url):
    r = httpx.get(url + "/nope", timeout=30)
    assert r.status_code == 404 and r.json()["error_type"] == "not_found"
    r = httpx.get(url + "/generate", timeout=30)
    assert r.status_code == 405 and set(r.json()) == {"error", "error_type"}


def test_openapi_fuzz_finds_no_server_error(url):
    """Property-based: schemathesis draws valid and invalid requests from /openapi.json (bounded: 100)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_dict(httpx.get(url + "/openapi.json", timeout=30).json())
    operations = [
        schema[path][method]
        for path, method in [
            ("/generate", "POST"),
            ("/generate_stream", "POST"),
            ("/", "POST"),
            ("/info", "GET"),
            ("/ready", "GET"),
        ]
    ]
    strategy = st.one_of(
        *[
            op.as_strategy(generation_mode=mode)
            for op in operations
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        ]
    )
    seen = []

    @settings(max_examples=100, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def call(case) -> None:
        response = case.call(base_url=url, timeout=60)
        seen.append(response.status_code)
        assert response.status_code < 500, (
            f"{case.method} {case.path} {case.body!r} -> {response.status_code} {response.text[:300]}"
        )
        if response.status_code >= 400:
            assert set(response.json()) == {"error", "error_type"}

    call()
    assert any(s == 200 for s in seen) and any(400 <= s < 500 for s in seen)


# ---- metadata, headers ------------------------------------------------------------------------
def test_info_health_ready_and_docs(url, tiny_bundle_dir):
    info = httpx.get(url + "/info", timeout=30).json()
    meta = json.loads((tiny_bundle_dir / "bundle.json").read_text())
    assert info["model_id"] == meta["model_id"]
    assert len(info["model_sha"]) == 64
    assert info["provider"] == "CPUExecutionProvider"
    assert info["variant"] == meta["default_variant"]["cpu"]
    assert info["max_input_tokens"] == meta["max_source_len"] and info["max_batch_size"] == 8
    assert httpx.get(url + "/health", timeout=30).json() == {"status": "ok"}
    assert httpx.get(url + "/ready", timeout=30).status_code == 200
    spec = httpx.get(url + "/openapi.json", timeout=30).json()
    params = spec["components"]["schemas"]["GenerateParameters"]["properties"]
    assert {"max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "details", "repetition_penalty"} <= set(params)
    assert "StreamResponse" in spec["components"]["schemas"]
    assert "text/event-stream" in spec["paths"]["/generate_stream"]["post"]["responses"]["200"]["content"]
    assert info["model_dtype"] == "float32"  # the test bundle serves fp32


def test_docs_pages_load_every_asset_from_this_server(url):
    """/docs and /redoc work offline: no http(s):// reference, and every script, style, icon and spec they load is here."""
    for page in ("/docs", "/redoc"):
        r = httpx.get(url + page, timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), page
        assert "http://" not in r.text and "https://" not in r.text, page
        refs = re.findall(r'(?:src|href|spec-url)="([^"]+)"', r.text) + re.findall(r"url: '([^']+)'", r.text)
        assert any(ref.endswith(".js") for ref in refs) and any("favicon" in ref for ref in refs), (page, refs)
        assert "/openapi.json" in refs, (page, refs)
        for ref in refs:
            assert ref.startswith("/"), (page, ref)
            asset = httpx.get(url + ref, timeout=30)
            assert asset.status_code == 200 and len(asset.content) > 100, (page, ref, asset.status_code)


@pytest.mark.parametrize(("variant", "dtype"), [("int8", "int8"), ("fp16", "float16")])
def test_info_names_the_precision_of_the_variant_served(tiny_bundle_dir, variant, dtype):
    with serving(tiny_bundle_dir, variant=variant) as s:
        info = httpx.get(s.url + "/info", timeout=30).json()
        assert (info["variant"], info["model_dtype"]) == (variant, dtype)
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200


def test_tgi_headers_and_request_id(url):
    r = httpx.post(url + "/generate", json={"inputs": "cat"}, headers={"x-request-id": "req-42"}, timeout=30)
    assert r.headers["x-request-id"] == "req-42"
    for h in ("x-total-time", "x-queue-time", "x-inference-time", "x-time-per-token", "x-generated-tokens"):
        assert r.headers[h].isdigit(), h
    assert int(r.headers["x-generated-tokens"]) >= 1
    assert len(httpx.get(url + "/health", timeout=30).headers["x-request-id"]) == 32  # made up when not sent
    assert "x-request-id" in httpx.post(url + "/generate", json={}, timeout=30).headers


# ---- cancellation -----------------------------------------------------------------------------
def test_client_disconnect_mid_stream_stops_generation(url, paced):
    paced(0.03)
    before = scrape(url)
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", url + "/generate_stream", json={"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}
        ) as r,
    ):
        events = sse_events(r.iter_lines())
        next(events), next(events)  # two tokens in, then the client goes away
    time.sleep(0.2)  # a few steps: the row leaves at the next step boundary
    t1 = metric(scrape(url), "attnserve_generated_tokens_total")
    time.sleep(0.3)
    after = scrape(url)
    assert metric(after, "attnserve_generated_tokens_total") == t1  # stopped growing
    assert t1 - metric(before, "attnserve_generated_tokens_total") < 12  # and well before the end
    assert metric(after, "attnserve_running_sequences") == 0
    cancelled = metric(after, "attnserve_requests_total", route="/generate_stream", outcome="cancelled")
    assert cancelled - metric(before, "attnserve_requests_total", route="/generate_stream", outcome="cancelled") == 1


def test_client_disconnect_without_streaming_cancels_too(url, paced):
    paced(0.03)
    before = scrape(url)
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.1)  # running now
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = scrape(url)
        if metric(after, "attnserve_requests_total", route="/generate", outcome="cancelled") > metric(
            before, "attnserve_requests_total", route="/generate", outcome="cancelled"
        ):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the disconnected request was not cancelled")
    deadline = time.monotonic() + 5  # the row leaves at the next step boundary
    while metric(scrape(url), "attnserve_running_sequences") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert metric(scrape(url), "attnserve_running_sequences") == 0


# ---- servers of their own ---------------------------------------------------------------------
def test_overload_burst_gets_only_200_and_429_with_retry_after_then_recovers(tiny_bundle_dir):
    with serving(tiny_bundle_dir, step_delay_s=0.02, max_batch_size=2, max_concurrent_requests=3) as s:

        def call(_: int) -> httpx.Response:
            return httpx.post(s.url + "/generate", json={"inputs": "transformer"}, timeout=60)

        with ThreadPoolExecutor(24) as pool:
            responses = list(pool.map(call, range(24)))
        statuses = [r.status_code for r in responses]
        assert set(statuses) == {200, 429}, statuses
        for r in responses:
            if r.status_code == 429:
                assert r.headers["retry-after"].isdigit() and int(r.headers["retry-after"]) >= 1
                assert r.json()["error_type"] == "overloaded"
        assert httpx.get(s.url + "/ready", timeout=30).status_code == 200
        assert call(0).status_code == 200
        samples = scrape(s.url)
        assert metric(samples, "attnserve_requests_total", outcome="overloaded") == statuses.count(429)


def test_timeout_answers_504_and_frees_the_slot(tiny_bundle_dir):
    with serving(tiny_bundle_dir, step_delay_s=0.1, max_batch_size=1, max_concurrent_requests=2, request_timeout_s=0.35) as s:
        r = httpx.post(s.url + "/generate", json={"inputs": "supercalifragilistic"}, timeout=60)
        assert r.status_code == 504 and r.json()["error_type"] == "timeout"
        assert s.service.scheduler.in_flight == 0
        status, events = stream(s.url + "/generate_stream", {"inputs": "supercalifragilistic"})
        assert status == 200 and events[-1]["error_type"] == "timeout"  # headers were sent: the error is the last event
        s.service.engine.step_delay_s = 0.0
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=60).status_code == 200
        samples = scrape(s.url)
        assert metric(samples, "attnserve_requests_total", outcome="timeout") == 2
        assert metric(samples, "attnserve_running_sequences") == 0


def test_health_answers_503_when_the_engine_loop_stops(tiny_bundle_dir):
    with serving(tiny_bundle_dir) as s:
        assert httpx.get(s.url + "/health", timeout=30).status_code == 200
        s.service.engine.fail = True
        r = httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30)
        assert r.status_code == 503 and r.json()["error_type"] == "unavailable"
        assert "stopped" in r.json()["error"] and "injected" not in r.json()["error"]
        h = httpx.get(s.url + "/health", timeout=30)
        assert h.status_code == 503 and h.json()["error_type"] == "unavailable"
        assert httpx.get(s.url + "/ready", timeout=30).status_code == 503
        assert httpx.post(s.url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 503


def test_metrics_counts_match_a_known_set_of_requests(tiny_bundle_dir):
    with serving(tiny_bundle_dir) as s:
        url = s.url
        answers = [generate(url, w) for w in ("cat", "hello", "attention")]
        status, events = stream(url + "/generate_stream", {"inputs": "zebra"})
        assert status == 200
        compat = httpx.post(url + "/", json={"inputs": "data"}, timeout=30)
        assert compat.status_code == 200
        for body in ({"inputs": ""}, {"inputs": "cat", "parameters": {"top_p": 2}}):
            assert httpx.post(url + "/generate", json=body, timeout=30).status_code == 422
        httpx.get(url + "/health", timeout=30)

        m = scrape(url)
        assert metric(m, "attnserve_requests_total", route="/generate", outcome="success") == 3
        assert metric(m, "attnserve_requests_total", route="/generate", outcome="validation") == 2
        assert metric(m, "attnserve_requests_total", route="/generate_stream", outcome="success") == 1
        assert metric(m, "attnserve_requests_total", route="/", outcome="success") == 1
        assert metric(m, "attnserve_requests_total") == 7
        assert metric(m, "attnserve_request_duration_seconds_count") == 5
        for name in ("queue_duration", "time_to_first_token", "inference_duration"):
            key = "attnserve_request_" + name if name == "queue_duration" else "attnserve_" + name
            assert metric(m, key + "_seconds_count") == 5, name
        assert metric(m, "attnserve_request_input_tokens_count") == 5
        assert metric(m, "attnserve_request_input_tokens_sum") == sum(
            len(w) for w in ("cat", "hello", "attention", "zebra", "data")
        )
        n_tokens = (
            sum(a["details"]["generated_tokens"] for a in answers) + len(events) + int(compat.headers["x-generated-tokens"])
        )
        n_tokens += int(httpx.post(url + "/generate", json={"inputs": "data"}, timeout=30).headers["x-generated-tokens"])
        m = scrape(url)
        assert metric(m, "attnserve_generated_tokens_total") == n_tokens
        assert metric(m, "attnserve_request_generated_tokens_sum") == n_tokens
        assert metric(m, "attnserve_inter_token_latency_seconds_count") == n_tokens - 6  # every token after a first
        assert metric(m, "attnserve_batch_size_sum") == n_tokens  # one row per step: requests came one at a time
        assert metric(m, "attnserve_decoder_step_duration_seconds_count") == n_tokens
        assert metric(m, "attnserve_encoder_duration_seconds_count") == 6
        assert metric(m, "attnserve_queue_size") == 0 and metric(m, "attnserve_running_sequences") == 0
        model_id = json.loads((tiny_bundle_dir / "bundle.json").read_text())["model_id"]
        assert all(dict(labels).get("model") == model_id for (name, labels) in m if name.startswith("attnserve_"))


def test_api_key_required_on_generation_routes_only(tiny_bundle_dir):
    from huggingface_hub import InferenceClient

    with serving(tiny_bundle_dir, api_key="s3cret") as s:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            r = httpx.post(s.url + "/generate", json={"inputs": "cat"}, headers=headers, timeout=30)
            assert r.status_code == 401, headers
            assert r.json()["error_type"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
        # auth comes before validation: an unauthenticated client learns nothing about its body
        assert httpx.post(s.url + "/generate_stream", json={}, timeout=30).status_code == 401
        ok = httpx.post(s.url + "/generate", json={"inputs": "cat"}, headers={"authorization": "Bearer s3cret"}, timeout=30)
        assert ok.status_code == 200
        assert InferenceClient(base_url=s.url, api_key="s3cret").text_generation("cat") == ok.json()["generated_text"]
        for path in ("/health", "/ready"):
            assert httpx.get(s.url + path, timeout=30).status_code == 200
        assert metric(scrape(s.url), "attnserve_requests_total", outcome="unauthorized") == 4


def test_without_an_api_key_no_authorization_is_needed(url):
    assert httpx.post(url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200
    assert (
        httpx.post(url + "/generate", json={"inputs": "cat"}, headers={"authorization": "Bearer x"}, timeout=30).status_code
        == 200
    )


def test_an_unexpected_error_on_a_generation_route_is_a_500_with_the_one_shape(url, monkeypatch):
    """The fast path answers /generate ahead of the app's error handlers: a bug still gets the app's 500 (no
    internals, the request id, counted as `internal`), and the server goes on serving."""
    from service.http.routes import generate as routes

    async def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    before = metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="internal")
    monkeypatch.setattr(routes, "generate_once", broken)
    r = httpx.post(url + "/generate", json={"inputs": "cat"}, headers={"x-request-id": "req-500"}, timeout=30)
    monkeypatch.undo()
    assert r.status_code == 500 and r.headers["x-request-id"] == "req-500"
    assert r.json() == {"error": "internal server error; the server log has the details", "error_type": "internal"}
    assert metric(scrape(url), "attnserve_requests_total", route="/generate", outcome="internal") - before == 1
    assert httpx.post(url + "/generate", json={"inputs": "cat"}, timeout=30).status_code == 200
