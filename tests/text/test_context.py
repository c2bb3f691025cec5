"""Heteronyms chosen by their sentence: the context component over HTTP, in process, in the bundle.

The default model (models/g2p-en) carries the shipped component; a tiny one is fitted here by
`attnserve-train context` on four homographs' sentences (seconds) to prove the export path on a copy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_harness import serving

from attnserve.service.engine.bundle import load_bundle, write_bundle_json
from attnserve.service.text.context import ContextChooser, context_features

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"
TRAIN = ROOT / "training" / "wikipedia_homographs" / "data" / "train"


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE) as s:
        yield s.url


def words(url: str, inputs: str, **parameters) -> list[dict]:
    r = httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["details"]["words"]


def reading(url: str, inputs: str, word: str, **parameters) -> list[str]:
    return [w["text"] for w in words(url, inputs, **parameters) if w["word"] == word]


# ---- what the user hears ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "inputs, word, expected",
    [
        ("I read it yesterday", "read", ["R EH1 D"]),
        ("I will read it", "read", ["R IY1 D"]),
        ("They live here", "live", ["L IH1 V"]),
        ("record a new record", "record", ["R AH0 K AO1 R D", "R EH1 K ER0 D"]),
        ("lead the team", "lead", ["L IY1 D"]),
        ("bass guitar", "bass", ["B EY1 S"]),
    ],
)
def test_a_heteronym_reads_as_its_sentence_says(url, inputs, word, expected):
    assert reading(url, inputs, word) == expected


# Everyday sentences a new user tried, each with the reading of the n-th occurrence of its homograph.
EVERYDAY = [
    ("Mr. and Mrs. Smith live on Elm Dr.", "live", 0, "L IH V"),
    ("Please close the door", "close", 0, "K L OW Z"),
    ("the invalid had an invalid ticket", "invalid", 0, "IH N V AH L AH D"),
    ("the invalid had an invalid ticket", "invalid", 1, "IH N V AE L AH D"),
    ("fresh produce", "produce", 0, "P R OW D UW S"),
    ("a minute amount", "minute", 0, "M AY N UW T"),
    ("a bass swam by", "bass", 0, "B AE S"),
    ("I object", "object", 0, "AH B JH EH K T"),
]


def test_everyday_sentences_read_their_heteronyms_as_a_listener_expects():
    """In process, the reader and the shipped component: stress aside, each homograph reads as its sentence says,
    and the answer says the context chose it."""
    from attnserve.service.client import Generator

    gen = Generator(DEFAULT_BUNDLE, threads=1)
    try:
        results = gen.generate_text_many([text for text, *_ in EVERYDAY])
    finally:
        gen.close()
    got = []
    for (_, word, nth, _), r in zip(EVERYDAY, results):
        at = [i for i, w in enumerate(r.words) if w.lower() == word][nth]
        answer = r.answers[at][0]
        got.append((" ".join(p.rstrip("012") for p in answer.text.split()), answer.source))
    assert got == [(expected, "context") for *_, expected in EVERYDAY]


def test_context_false_reads_the_lexicons_first_entry_as_before(url):
    assert reading(url, "I read it yesterday", "read", context=False) == ["R EH1 D"]  # CMUdict's first
    assert reading(url, "I will read it", "read", context=False) == ["R EH1 D"]
    assert reading(url, "They live here", "live", context=False) == ["L AY1 V"]
    plain = words(url, "I will read it", context=False)
    assert {w["source"] for w in plain} == {"lexicon"} and all(w.get("candidates") is None for w in plain)


def test_details_say_context_and_give_the_candidates_with_their_scores(url):
    read = [w for w in words(url, "I will read it") if w["word"] == "read"][0]
    assert read["source"] == "context" and read["score"] is None
    assert [c["text"] for c in read["candidates"]] == ["R IY1 D", "R EH1 D"]
    scores = [c["score"] for c in read["candidates"]]
    assert scores == sorted(scores, reverse=True) and abs(sum(scores) - 1) < 1e-6
    others = [w for w in words(url, "I will read it") if w["word"] != "read"]
    assert {w["source"] for w in others} == {"lexicon"} and all(w["candidates"] is None for w in others)


def test_a_lone_homograph_gets_the_most_frequent_reading_of_the_training_sentences(url):
    counts: dict[str, int] = {}
    for line in (TRAIN / "live.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        wordid = line.split("\t")[1].strip('"')
        counts[wordid] = counts.get(wordid, 0) + 1
    most = max(counts, key=counts.get)
    expected = {"live_adj": "L AY1 V", "live_vrb": "L IH1 V"}[most]
    (w,) = words(url, "live")
    assert w["text"] == expected and w["source"] == "context"
    assert reading(url, "Live!", "live") == [expected]


def test_the_openai_routes_choose_alike_and_take_context_as_a_body_field(url):
    def complete(prompt: str, **extra) -> str:
        body = {"model": "g2p-en", "prompt": prompt, **extra}
        r = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    assert complete("I will read it").split(" | ")[2] == "R IY1 D"
    assert complete("I will read it", context=False).split(" | ")[2] == "R EH1 D"
    chat = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "g2p-en", "messages": [{"role": "user", "content": "They live here"}]},
        timeout=60,
    )
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"].split(" | ")[1] == "L IH1 V"


def test_the_stream_reads_the_same_heteronym(url):
    with httpx.stream("POST", url + "/generate_stream", json={"inputs": "I will read it"}, timeout=60) as r:
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    assert events[-1]["generated_text"].split(" | ")[2] == "R IY1 D"


def test_the_same_sentence_gets_the_same_answer_alone_and_among_concurrent_clients(url):
    sentences = ["I read it yesterday", "I will read it", "They live here", "record a new record", "the wind blew"]
    alone = {s: words(url, s) for s in sentences}
    with ThreadPoolExecutor(24) as pool:
        together = list(pool.map(lambda k: (sentences[k % 5], words(url, sentences[k % 5])), range(96)))
    assert all(got == alone[s] for s, got in together)


def test_info_shows_the_component(url):
    assert httpx.get(url + "/info").json()["context"] == {"file": "context.json.gz", "homographs": 104}


def test_the_server_setting_turns_it_off():
    with serving(DEFAULT_BUNDLE, context=False) as s:
        assert httpx.get(s.url + "/info").json()["context"] is None
        assert reading(s.url, "I will read it", "read") == ["R EH1 D"]
        assert reading(s.url, "I will read it", "read", context=True) == ["R EH1 D"]  # nothing loaded to ask


def test_the_in_process_generator_and_attnserve_generate_choose_alike(tmp_path):
    from attnserve.service.cli import generate_main
    from attnserve.service.client import Generator

    gen = Generator(DEFAULT_BUNDLE, threads=1)
    try:
        (on,) = gen.generate_text_many(["I will read it"])
        (off,) = gen.generate_text_many(["I will read it"], context=False)
    finally:
        gen.close()
    assert on.text.split(" | ")[2] == "R IY1 D" and on.answers[2][0].source == "context"
    assert off.text.split(" | ")[2] == "R EH1 D"

    src, out = tmp_path / "in.txt", tmp_path / "out.tsv"
    src.write_text("They live here\n")
    base = [str(src), "-o", str(out), "--bundle", str(DEFAULT_BUNDLE), "--threads", "1", "--no-progress"]
    assert generate_main(base) == 0
    assert out.read_text().split("\t")[1].split(" | ")[1] == "L IH1 V"
    assert generate_main(base + ["--no-context"]) == 0
    assert out.read_text().split("\t")[1].split(" | ")[1] == "L AY1 V"


# ---- the bundle -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_context_run(tmp_path_factory) -> Path:
    """`attnserve-train context` on four homographs' sentences, fitted on the whole tiny split."""
    base = tmp_path_factory.mktemp("ctx")
    data = base / "train"
    data.mkdir()
    for name in ("read", "live", "record", "wind"):
        shutil.copy(TRAIN / f"{name}.tsv", data / f"{name}.tsv")
    out = base / "run"
    cmd = [
        sys.executable,
        "-m",
        "attnserve.training",
        "context",
        "--out",
        str(out),
        "--set",
        f"data={data}",
        "--set",
        "iterations=60",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "heldout.json").read_text())["homographs"] == 4
    return out


def copy_without_context(tmp_path: Path) -> Path:
    """The default bundle as it was before it had a context component (bundle.json without the entry)."""
    out = tmp_path / "g2p-en"
    shutil.copytree(DEFAULT_BUNDLE, out)
    meta = json.loads((out / "bundle.json").read_text())
    del meta["context"], meta["files"]["context.json.gz"]
    (out / "context.json.gz").unlink()
    write_bundle_json(out, meta)
    return out


def test_add_context_adds_the_file_hashed_and_leaves_the_graphs_alone(tmp_path, tiny_context_run):
    bundle = copy_without_context(tmp_path)
    before = json.loads((bundle / "bundle.json").read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "attnserve.export", "add-context", str(bundle), str(tiny_context_run)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    after = json.loads((bundle / "bundle.json").read_text())
    assert {k: v for k, v in after["files"].items() if k != "context.json.gz"} == before["files"]
    assert sorted(after["context"]["homographs"]) == ["live", "read", "record", "wind"]
    assert load_bundle(bundle).context_path == bundle / "context.json.gz"
    with serving(bundle) as s:
        assert reading(s.url, "They live here", "live")[0] in ("L IH1 V", "L AY1 V")
        assert words(s.url, "They live here")[1]["source"] == "context"
        assert words(s.url, "I object to that")[1]["source"] == "lexicon"  # not among the four


def test_a_bundle_without_context_serves_as_before(tmp_path):
    bundle = copy_without_context(tmp_path)
    with serving(bundle) as s:
        got = words(s.url, "I will read it. They live here.")
        assert {w["source"] for w in got} == {"lexicon"} and all(w["candidates"] is None for w in got)
        assert [w["text"] for w in got if w["word"] in ("read", "live")] == ["R EH1 D", "L AY1 V"]


def test_a_changed_context_file_stops_start_up(tmp_path):
    from attnserve.service.engine.bundle import BundleError

    bundle = tmp_path / "g2p-en"
    shutil.copytree(DEFAULT_BUNDLE, bundle)
    (bundle / "context.json.gz").write_bytes(b"changed")
    with pytest.raises(BundleError, match="context.json.gz: sha256 does not match"):
        load_bundle(bundle)


def test_training_and_serving_share_one_feature_extractor():
    from attnserve.training import context as training_context

    assert training_context.context_features is context_features
    chooser = ContextChooser.load(DEFAULT_BUNDLE / "context.json.gz")
    assert chooser.covers("read") and not chooser.covers("hello") and len(chooser.homographs) >= 100


def test_the_written_sentences_mark_a_reading_of_a_covered_homograph(tmp_path):
    from attnserve.training.context import WRITTEN, Sentence, read_label_map, read_written

    labels = read_label_map()
    written = read_written(WRITTEN, labels)
    assert len(written) >= 100
    assert all(s.text[s.start : s.end].lower() == s.homograph and "{" not in s.text for s in written)
    assert Sentence("object", "AH0 B JH EH1 K T", "I object to that remark.", 2, 8) in written

    bad = tmp_path / "written.tsv"
    bad.write_text("homograph\twordid\tsentence\nobject\tobject_vrb\tI object, unmarked.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"written.tsv:2: .*\{object\} marked"):
        read_written(bad, labels)
