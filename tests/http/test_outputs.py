"""What the served model answers: the PyTorch reference's ids, seeds, streams that add up to /generate's text,
return_full_text, stop sequences and truncate, and no reference cycles left behind.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from service_harness import scrape, stream
from tgi_calls import WORDS, batches_larger_than_one, generate, token_ids


def test_greedy_output_equals_the_pytorch_reference(url, tiny_run_dir, tiny_bundle_dir):
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import DecodingOptions
    from attnserve.training.decode import generate_ids
    from attnserve.training.run import load_model, load_run_tokenizers

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
