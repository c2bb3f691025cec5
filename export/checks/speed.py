"""The int8 gate's speed condition (export/pipeline/int8_gate.py): greedy tokens/s of each engine, through the service's
own loop, on verify's default corpus. What `attnserve-bench` (export/bench.py) measures per step, this measures
per word list, as the gate decides: int8 must be faster than fp32 at batch 1 and at batch 32."""

from __future__ import annotations

import time

from attnserve.export.checks.corpus import default_corpus, source_ids
from attnserve.service.engine.engine import DecodingOptions, Engine


def bench_engine_speed(engines: dict[str, Engine], dataset: str | None, strip_stress: bool, rounds: int = 3) -> dict:
    """Greedy tokens/s per engine at batch 1 (48 inputs) and batch 32 (256 inputs); best of
    `rounds`, engines interleaved so background load hits both alike."""
    sources = default_corpus({"dataset": dataset or "cmudict"}, 256)
    any_engine = next(iter(engines.values()))
    ids = [source_ids(any_engine.src_tokenizer, s, any_engine.max_source_len, any_engine.unk_id) for s in sources]
    greedy = DecodingOptions(max_new_tokens=any_engine.max_target_len)
    best: dict[str, dict[str, float]] = {name: {} for name in engines}
    for batch, inputs in (("batch_1", ids[:48]), ("batch_32", ids)):
        for _ in range(rounds):
            for name, engine in engines.items():
                t = time.perf_counter()
                res = engine.generate(inputs, greedy, batch_size=1 if batch == "batch_1" else 32)
                tps = sum(r.generated_tokens for r in res) / (time.perf_counter() - t)
                best[name][batch] = max(best[name].get(batch, 0.0), tps)
    return {name: {b: round(x, 1) for b, x in v.items()} for name, v in best.items()}
