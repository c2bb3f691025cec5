"""POST /score, Generator.score and `attnserve-generate --score`: the served model's log-probabilities of given
answers by teacher forcing, on real ONNX Runtime sessions and a real server on 127.0.0.1.

Both cache kinds: the tiny bundle's fp32 variant (v1, concat) and its int8 variant (v2, in place), and the
default bundle's served int8 variant.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_harness import metric, scrape, serving

from attnserve.service.client import Generator
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine, InputError
from attnserve.service.engine.scheduler import ScoreTicket
from attnserve.service.engine.scoring import ForcedBatch

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"
WORDS = ["attention", "cat", "serendipity", "onomatopoeia", "read", "zyxwv", "phone", "xylophone"]
OTHER = "AH0 B AH0 K"  # no word above sounds like this


def greedy(url: str, word: str) -> dict:
    """The model's own greedy answer with its details (the lexicon left out)."""
    params = {"details": True, "lexicon": False}
    r = httpx.post(url + "/generate", json={"inputs": word, "parameters": params}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def score(url: str, word: str, targets: list[str], **params) -> httpx.Response:
    return httpx.post(url + "/score", json={"inputs": word, "targets": targets, "parameters": params or None}, timeout=60)


def check_scores_greedy_answers(url: str, gen: Generator) -> None:
    """Greedy generation's own answer, scored: the total is the sum of its details.tokens' log-probabilities (end token
    included) to 1e-4, token by token; and HTTP and the in-process API give the same numbers."""
    for word in WORDS:
        answer = greedy(url, word)
        tokens = answer["details"]["tokens"]
        assert tokens[-1]["special"], "greedy answers here end with the end token"
        r = score(url, word, [answer["generated_text"], OTHER])
        assert r.status_code == 200, r.text
        body = r.json()
        s = body["scores"][0]
        assert s["target"] == answer["generated_text"]
        assert [t["id"] for t in s["tokens"]] == [t["id"] for t in tokens]
        assert [t["text"] for t in s["tokens"]] == [t["text"] for t in tokens]
        assert s["total"] == pytest.approx(sum(t["logprob"] for t in tokens), abs=1e-4)
        for mine, theirs in zip(s["tokens"], tokens):
            assert mine["logprob"] == pytest.approx(theirs["logprob"], abs=1e-4)
        assert s["score"] == pytest.approx(s["total"] / len(tokens), abs=1e-9)  # the n-best's length normalisation
        assert body["scores"][1]["total"] < s["total"]  # another word's answer is far less likely
        in_process = gen.score(word, [answer["generated_text"], OTHER])
        for http_score, mine in zip(body["scores"], in_process):
            assert mine.total == pytest.approx(http_score["total"], abs=1e-9)
            assert mine.score == pytest.approx(http_score["score"], abs=1e-9)
            assert [t["logprob"] for t in mine.tokens] == pytest.approx([t["logprob"] for t in http_score["tokens"]], abs=1e-9)


def test_default_model_scores_its_greedy_answers_as_it_generated_them():
    with serving(DEFAULT_BUNDLE) as server, Generator(DEFAULT_BUNDLE, threads=1) as gen:
        assert server.service.engine.variant == "int8" and server.service.engine.kv_cache == "in_place"
        check_scores_greedy_answers(server.url, gen)


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_tiny_model_scores_its_greedy_answers_as_it_generated_them(tiny_bundle_dir, variant):
    with serving(tiny_bundle_dir, variant=variant) as server, Generator(tiny_bundle_dir, variant=variant, threads=1) as gen:
        assert server.service.engine.kv_cache == ("concat" if variant == "fp32" else "in_place")
        check_scores_greedy_answers(server.url, gen)


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_forced_rows_score_alike_alone_and_joining_a_running_batch(tiny_bundle_dir, variant):
    """The engine alone: each word's targets scored in a batch of their own, and again joining a batch at different
    steps, beside other words' rows (v2 rows are bitwise the same; v1 fp32 within float32 rounding)."""
    engine = Engine(load_bundle(tiny_bundle_dir), variant=variant, threads=1)
    results = engine.generate(WORDS, DecodingOptions(max_new_tokens=engine.max_target_len))
    targets = [[r.token_ids, r.token_ids[:1], [*r.token_ids, *r.token_ids]] for r in results]

    def run(groups: list[list[ScoreTicket]]) -> None:
        batch = ForcedBatch(engine)
        for group in groups:
            batch.add(group)
            batch.step()
        while len(batch):
            batch.step()

    alone = [ScoreTicket(engine.encode_text(w), t, math.inf, None) for w, t in zip(WORDS, targets)]
    for t in alone:
        run([[t]])
    together = [ScoreTicket(engine.encode_text(w), t, math.inf, None) for w, t in zip(WORDS, targets)]
    run([together[:3], together[3:5], [], together[5:]])
    for a, b in zip(alone, together):
        for x, y in zip(a.scores, b.scores):
            assert x.token_ids == y.token_ids
            if variant == "int8":
                assert x.logprobs == y.logprobs
            else:
                assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)


def test_scores_are_the_same_alone_and_among_concurrent_clients():
    """Over HTTP on the default model: each word's scores alone, then with 8 clients scoring and generating at once."""
    with serving(DEFAULT_BUNDLE, step_delay_s=0.002, max_batch_size=16) as server:
        url = server.url
        targets = {w: [greedy(url, w)["generated_text"], "AH0 B AH0 K"] for w in WORDS}
        alone = {w: score(url, w, targets[w]).json() for w in WORDS}

        def client(i: int) -> dict:
            w = WORDS[i % len(WORDS)]
            if i % 3 == 2:  # generation in the same server at the same time
                greedy(url, w)
                return {}
            return {w: score(url, w, targets[w]).json()}

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(client, range(48)))
        compared = 0
        for answer in answers:
            for w, body in answer.items():
                assert body == alone[w]
                compared += 1
        assert compared == 32


def test_score_refuses_what_it_cannot_score_with_the_service_error_shape(tiny_bundle_dir):
    with serving(tiny_bundle_dir, max_batch_size=4) as server:
        url = server.url
        cases = [
            ({"inputs": "cat", "targets": ["K AE1 QQ"]}, "QQ"),
            ({"inputs": "cat", "targets": []}, "targets"),
            ({"inputs": "cat"}, "targets"),
            ({"inputs": "cat", "targets": ["K AE1 T", "  "]}, "target 1 is empty"),
            ({"inputs": "cat", "targets": ["K AE1 T </s>"]}, "'</s>'"),
            ({"inputs": "cat", "targets": ["K AE1 T " * 40]}, "tokens long"),
            ({"inputs": "cat", "targets": ["K AE1 T"] * 5}, "max_batch_size=4"),
            ({"inputs": "cat", "targets": ["K AE1 T"], "parameters": {"beam": 2}}, "parameters.beam"),
            ({"inputs": "cat", "targets": ["K AE1 T"], "parameters": {"top_n_tokens": 99}}, "top_n_tokens"),
            ({"inputs": "two cats", "targets": ["K AE1 T"]}, "2 words"),
            ({"inputs": "", "targets": ["K AE1 T"]}, "inputs"),
            ({"inputs": "cat", "targets": "K AE1 T"}, "targets"),
        ]
        for body, named in cases:
            r = httpx.post(url + "/score", json=body, timeout=30)
            assert r.status_code == 422, (body, r.text)
            assert r.json()["error_type"] == "validation"
            assert named in r.json()["error"], (named, r.json())
        ok = score(url, "cat", ["K AE1 T"], top_n_tokens=2)
        assert ok.status_code == 200, ok.text
        (s,) = ok.json()["scores"]
        assert len(s["top_tokens"]) == len(s["tokens"]) and all(len(t) == 2 for t in s["top_tokens"])
        assert ok.json()["input_length"] == 3
        samples = scrape(url)
        assert metric(samples, "attnserve_requests_total", route="/score", outcome="success") == 1
        assert metric(samples, "attnserve_requests_total", route="/score", outcome="validation") == len(cases)
        assert "/score" in httpx.get(url + "/openapi.json", timeout=30).json()["paths"]


def test_the_lexicon_is_never_consulted():
    """A word the lexicon knows is scored by the model: the lexicon's answer has a real log-probability."""
    with Generator(DEFAULT_BUNDLE, threads=1) as gen:
        assert gen.lexicon is not None and gen.lexicon.lookup("attention")
        (answer,) = gen.generate_text_many(["attention"])
        assert answer.answers[0][0].source == "lexicon"
        (s,) = gen.score("attention", [answer.text])
        assert all(t["logprob"] is not None and t["logprob"] < 0 for t in s.tokens)
        with pytest.raises(InputError, match="XX"):
            gen.score("attention", ["AH0 T XX N"])


def test_generate_cli_scores_a_tsv_of_pairs(tiny_bundle_dir, tmp_path, capsys):
    from attnserve.service.cli import generate_main

    with Generator(tiny_bundle_dir, threads=1) as gen:
        expected = gen.score("cat", ["K AE1 T", "K AA1 T"])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("cat\tK AE1 T\ncat\tK AA1 T\nno tab here\ndog\tD QQ G\n", encoding="utf-8")
    out = tmp_path / "scores.tsv"
    flags = ["--bundle", str(tiny_bundle_dir), "--threads", "1", "--no-progress"]
    code = generate_main(["--score", str(pairs), "-o", str(out), *flags])
    assert code == 1  # two lines could not be scored, and the others were
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r[:2] for r in rows] == [["cat", "K AE1 T"], ["cat", "K AA1 T"]]
    for row, s in zip(rows, expected):
        assert float(row[2]) == pytest.approx(s.total, abs=1e-6) and float(row[3]) == pytest.approx(s.score, abs=1e-6)
    err = capsys.readouterr().err
    assert "line 3: expected source<TAB>target" in err and "line 4:" in err and "'QQ'" in err


def test_score_and_samples_need_only_what_generation_needs_and_never_answer_500(tiny_bundle_dir):
    """The API key guards /score as it guards /generate (/samples is metadata, like /info); schemathesis draws valid
    and invalid bodies from /openapi.json, and none gets a 500 or another error shape."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    headers = {"authorization": "Bearer s3cret"}
    with serving(tiny_bundle_dir, api_key="s3cret") as server:
        url = server.url
        body = {"inputs": "cat", "targets": ["K AE1 T"]}
        assert httpx.post(url + "/score", json=body, timeout=30).status_code == 401
        assert httpx.post(url + "/score", json=body, headers=headers, timeout=30).status_code == 200
        assert httpx.get(url + "/samples", timeout=30).status_code == 200

        schema = schemathesis.openapi.from_dict(httpx.get(url + "/openapi.json", timeout=30).json())
        operations = [schema["/score"]["POST"], schema["/samples"]["GET"]]
        modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        strategy = st.one_of(*[op.as_strategy(generation_mode=mode) for op in operations for mode in modes])
        seen = []

        @settings(max_examples=80, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def call(case) -> None:
            response = case.call(base_url=url, headers=headers, timeout=60)
            seen.append(response.status_code)
            assert response.status_code < 500, f"{case.method} {case.path} {case.body!r} -> {response.text[:300]}"
            if response.status_code >= 400:
                assert set(response.json()) == {"error", "error_type"}

        call()
        assert any(s == 200 for s in seen) and any(s == 422 for s in seen)


def test_lexicon_check_lists_the_least_likely_entries_first(capsys):
    """benchmarks/lexicon_check.py on a small sample of the default bundle's lexicon: its rows are the least likely
    entries, lowest mean first, each scored as Generator.score scores it."""
    from benchmarks import lexicon_check as module

    assert module.main(["--limit", "40", "--top", "5", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("word "))
    rows = [line.split() for line in lines[header + 1 :]]
    assert len(rows) == 5
    means = [float(r[-1]) for r in rows]
    assert means == sorted(means)
    word, *phones, total, mean = rows[0]
    with Generator(DEFAULT_BUNDLE, threads=1) as gen:
        (s,) = gen.score(word, [" ".join(phones)])
    assert float(total) == pytest.approx(s.total, abs=1e-3) and float(mean) == pytest.approx(s.score, abs=1e-3)


def test_a_scoring_request_past_its_deadline_ends_as_a_timeout(tiny_bundle_dir):
    from attnserve.service.client import GenerationError

    with Generator(tiny_bundle_dir, threads=1, request_timeout_s=0.0) as gen:
        with pytest.raises(GenerationError, match="request timeout"):
            gen.score("cat", ["K AE1 T"])
    with Generator(tiny_bundle_dir, threads=1) as gen:  # and a server that stopped refuses with one line
        gen.close()
        with pytest.raises(GenerationError, match="shutting down"):
            gen.score("cat", ["K AE1 T"])
