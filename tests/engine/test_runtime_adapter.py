"""The decode step's one adapter over ONNX Runtime (service/engine/runtime.py): the private fast path only on
the versions it is known on, and the public API elsewhere, with the same answers from both."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from attnserve.service.engine import runtime
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine

WORDS = ["attention", "hello", "a", "phonetics", "zebra", "characteristically", "it", "onnx", "runtime", "cat"]
OPTIONS = [
    DecodingOptions(max_new_tokens=48, logprobs=True),
    DecodingOptions(max_new_tokens=48, num_beams=3, best_of=2),  # beam rows follow their parents' cache
    DecodingOptions(max_new_tokens=48, do_sample=True, seed=7, logprobs=True),
]


@pytest.mark.parametrize(
    "version, private",
    [("1.30.2", False), ("2.0.0", False), ("0.9", False), ("not a version", False), (ort.__version__, True)],
)
def test_the_private_path_is_taken_only_on_the_versions_it_is_known_on(version, private):
    assert runtime.private_step_api(version) is private


def answers(engine: Engine) -> list:
    return [(r.token_ids, r.logprobs) for o in OPTIONS for r in engine.generate(WORDS, o, batch_size=8, refill=True)]


@pytest.mark.parametrize("variant", ["fp32", "int8"])  # the v1 step (run_with_ort_values) and the v2 one (IOBinding)
def test_the_public_api_fallback_gives_the_same_answers(tiny_bundle_dir, monkeypatch, variant):
    bundle = load_bundle(tiny_bundle_dir)
    fast = Engine(bundle, variant=variant, provider="cpu", threads=1)
    assert fast.step_calls.private
    monkeypatch.setattr(runtime, "PRIVATE_STEP_API", False)
    public = Engine(bundle, variant=variant, provider="cpu", threads=1)
    assert not public.step_calls.private
    assert isinstance(public.values.input(np.zeros(2)), ort.OrtValue)  # the public wrapper, not the C value
    assert answers(public) == answers(fast)
