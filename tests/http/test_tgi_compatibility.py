"""TGI's clients and parameters against a real uvicorn server on 127.0.0.1 serving the tiny bundle:
huggingface_hub's InferenceClient, the bodies it sends, n-best, alternatives and TGI's other parameters.
"""

from __future__ import annotations

import httpx
import pytest
from service_harness import stream
from tgi_calls import HF_HUB_0X_BODY, generate, token_ids


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
