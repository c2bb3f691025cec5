"""attnserve-export add-confidence: the guess threshold chosen on the dev split, recorded in bundle.json with what
it flags on the test split; the bundle still loads, its graphs untouched."""

import shutil

import numpy as np
import pytest

from attnserve.export.pipeline import confidence
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import Engine


def test_the_threshold_flags_the_chosen_share_of_dev_answers(tiny_bundle_dir, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(tiny_bundle_dir, bundle)
    graphs = {p.name: p.read_bytes() for p in bundle.glob("*.onnx")}
    meta = confidence.add_confidence(bundle, share=0.2, limit=150, log=lambda _m: None)
    field = meta["confidence"]
    assert field["score"] == "mean_logprob" and field["share"] == 0.2 and field["chosen_on"]["split"] == "dev"
    assert load_bundle(bundle).meta["confidence"] == field  # written, hashed, and accepted by the loader
    assert {p.name: p.read_bytes() for p in bundle.glob("*.onnx")} == graphs

    engine = Engine(load_bundle(bundle), threads=1)
    dev_scores, _ = confidence._scored(engine, "cmudict", "dev", 150)
    assert np.mean(dev_scores < field["threshold"]) == pytest.approx(0.2, abs=0.02)
    test = field["test"]
    assert test["words"] == 150 and 0 <= test["wrong_flagged"] <= 1 and 0 < test["flagged"] < 0.5


def test_a_share_outside_zero_and_one_is_refused(tiny_bundle_dir):
    with pytest.raises(ValueError, match="share must be between 0 and 1"):
        confidence.guess_threshold(tiny_bundle_dir, share=1.5)
