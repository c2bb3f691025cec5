"""attnserve-eval scores a bundle as the server answers it: a source longer than the model reads is refused
there (422), so it counts as wrong here, never as the answer to its first max_source_len tokens."""

from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.training import evaluate
from attnserve.training.data import Example


def test_a_source_past_max_source_len_counts_as_wrong_and_is_reported(tiny_bundle_dir, monkeypatch):
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", provider="cpu", threads=1)
    word = "attention"
    (answer,) = engine.generate([engine.encode_text(word)], DecodingOptions(max_new_tokens=engine.max_target_len))
    long_source = word * (engine.max_source_len // len(word) + 1)  # longer than the model reads
    examples = [Example(word, [answer.text]), Example(long_source, [answer.text])]
    monkeypatch.setattr(evaluate, "load_examples", lambda *_a, **_k: examples)
    report = evaluate.evaluate_engine(engine, "unused", "test", None, False, "seq2seq")
    assert report["too_long"] == 1
    assert report["exact_match"] == 50.0  # the short one right, the long one refused
