"""benchmarks/score_heteronyms.py, the outside scorer of heteronyms, maps each reading to the CMUdict
pronunciation the project's training maps it to and holds out the same tenth, though it shares no code
with the project; and it scores a real server as its docstring says."""

import json
import subprocess
import sys
from pathlib import Path

from service_harness import serving

from attnserve.training.context import ContextConfig, read_label_map, read_sentences, split_held_out
from benchmarks import score_heteronyms as scorer

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = ROOT / "training" / "wikipedia_homographs"  # holds data/train and data/wordids.tsv, as a checkout does


def test_its_label_map_is_the_one_the_project_trains_on():
    outside = scorer.label_map(CHECKOUT, scorer.cmudict())
    assert outside == read_label_map()
    assert len({h for h, _ in outside.values()}) == 104


def test_its_held_out_tenth_is_the_one_training_held_out():
    labels = scorer.label_map(CHECKOUT, scorer.cmudict())
    outside = scorer.held_out_tenth(scorer.sentences(CHECKOUT, "train", labels))
    _, inside = split_held_out(read_sentences(Path(ContextConfig().data), read_label_map()))
    assert [(it["text"], it["start"], it["label"]) for it in outside] == [(s.text, s.start, s.label) for s in inside]
    assert len(outside) == 900


def test_it_scores_a_running_server_and_counts_a_refusal_as_wrong(tmp_path):
    data = tmp_path / "checkout" / "data"
    (data / "train").mkdir(parents=True)
    (data / "eval").mkdir()
    (data / "wordids.tsv").write_bytes((CHECKOUT / "data" / "wordids.tsv").read_bytes())
    (data / "train" / "live.tsv").write_bytes((CHECKOUT / "data" / "train" / "live.tsv").read_bytes())
    (data / "eval" / "live.tsv").write_text(
        '"homograph"\t"wordid"\t"sentence"\t"start"\t"end"\n'
        "live\tlive_vrb\tThey live here.\t5\t9\n"
        "live\tlive_adj\tThe show was broadcast live.\t23\t27\n"
        # longer than the server's max_text_chars below: refused with a 422 (a symbol such as \u03c9 no longer is)
        "live\tlive_vrb\tThey live in a small town far away from the sea.\t5\t9\n",
        encoding="utf-8",
    )
    out = tmp_path / "report.json"
    with serving(ROOT / "models" / "g2p-en", max_text_chars=40) as s:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.score_heteronyms", str(tmp_path / "checkout"), "--url", s.url, "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["sentences"] == 3 and report["refused_or_unanswered"] == 1
    assert abs(report["accuracy"] - 2 / 3) < 1e-9
    assert [w["answer"] for w in report["wrong"]] == [None]
