"""Where a served request's CPU goes: the event loop, and on the engine thread the decoder's calls, the encoder's calls
and the Python around them.

    .venv/bin/python -m benchmarks.tax_parts [--server-repo CHECKOUT] [--route /generate_stream]
        [--clients 1,64] [--requests 4000] [--engine-bench BENCH.json | --bench] [--cold] [--out DIR]

Serves the default model from the checkout (`http_overhead.start_server`: core 0, `--threads 1`, max batch 32) with a
`sitecustomize` that adds up, in thread CPU, every decoder step (`Engine.run_step`), every encoder call and every
join (`SlotBatch.add`), with the rows, source width and encoder batch of each, and writes the totals on SIGUSR1.
`http_overhead`'s lean client drives it from core 1 (out-of-dictionary pseudo-words, closed loop): one request per
client to warm up, then `--requests` measured ones per client count. The server's CPU comes from /proc (all threads,
and by thread); "engine Python" is the engine thread's CPU less its decoder and encoder calls.

With `--engine-bench` (an `attnserve-bench` report with the ort-int8 batch-32, 8-token cell) or `--bench` (that cell
measured after the server has gone), each part is also given as a multiple of the serving tax's divisor
(http_overhead.py, "serving tax"): the engine's CPU per word.

`--cold`: the same numpy call (the log-softmax a step takes of its logits, 4 rows) timed after nothing and after a
decoder step of the default model: what the step's Python costs once ONNX Runtime has filled the caches.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from benchmarks import http_overhead as h
from benchmarks.measure import machine, signalled_totals, write_report

SITECUSTOMIZE = """
import os, signal, time
import attnserve.service.engine.engine as _engine
import attnserve.service.engine.slots as _slots
_t = time.thread_time
_totals = {"decoder_s": 0.0, "steps": 0, "step_rows": 0, "step_width": 0, "encoder_s": 0.0, "encoder_calls": 0,
           "encoder_words": 0, "join_s": 0.0}
_run_step, _load, _add = _engine.Engine.run_step, _engine.Engine._load, _slots.SlotBatch.add
def run_step(self, batch):
    t = _t(); out = _run_step(self, batch); _totals["decoder_s"] += _t() - t
    _totals["steps"] += 1; _totals["step_rows"] += batch.n; _totals["step_width"] += batch.width
    return out
class _TimedEncoder:
    def __init__(self, session): self._session = session
    def __getattr__(self, name): return getattr(self._session, name)
    def run(self, output_names, feeds, *args):
        t = _t(); out = self._session.run(output_names, feeds, *args); _totals["encoder_s"] += _t() - t
        _totals["encoder_calls"] += 1; _totals["encoder_words"] += len(next(iter(feeds.values())))
        return out
def load(self, so, use_cuda):
    _load(self, so, use_cuda); self.encoder = _TimedEncoder(self.encoder)
def add(self, gens, sources):
    t = _t(); _add(self, gens, sources); _totals["join_s"] += _t() - t
_engine.Engine.run_step, _engine.Engine._load, _slots.SlotBatch.add = run_step, load, add
def _dump(*_):
    with open(os.environ["TAX_PARTS_OUT"], "a") as f:
        f.write(repr(dict(_totals)) + "\\n")
signal.signal(signal.SIGUSR1, _dump)
"""


def level(url: str, pid: int, route: str, words: list[str], clients: int, requests: int, out: Path, n: int) -> dict:
    """One client count: warm-up, then the measured requests; the parts per request, in ms."""
    asyncio.run(h._closed_loop(url, route, words, "g2p-en", clients, clients))
    before, cpu0, threads0 = signalled_totals(out, pid, n), h.proc_cpu_s(pid), h.thread_cpu_s(pid)
    answered, failed = asyncio.run(h._closed_loop(url, route, words, "g2p-en", clients, requests))
    cpu, threads1 = h.proc_cpu_s(pid) - cpu0, h.thread_cpu_s(pid)
    after = signalled_totals(out, pid, n + 1)
    if failed or not answered:
        raise RuntimeError(f"{route} at {clients} clients: {failed} of {requests} requests failed")
    d = {k: after[k] - before[k] for k in after}
    per = {k: (threads1[k] - threads0[k]) * 1000 / answered for k in threads1}
    engine_ort = (d["decoder_s"] + d["encoder_s"]) * 1000 / answered
    return {
        "clients": clients,
        "answered": answered,
        "ms_per_request": {
            "server": cpu * 1000 / answered,
            "event_loop": per["event_loop"],
            "engine_thread": per["engine"],
            "decoder_calls": d["decoder_s"] * 1000 / answered,
            "encoder_calls": d["encoder_s"] * 1000 / answered,
            "engine_python": per["engine"] - engine_ort,
            "of_which_joins": d["join_s"] * 1000 / answered,
        },
        "steps_per_request": d["steps"] / answered,
        "mean_rows_per_step": d["step_rows"] / max(1, d["steps"]),
        "mean_source_width": d["step_width"] / max(1, d["steps"]),
        "ms_per_decoder_step": d["decoder_s"] * 1000 / max(1, d["steps"]),
        "encoder_calls_per_request": d["encoder_calls"] / answered,
        "mean_words_per_encoder_call": d["encoder_words"] / max(1, d["encoder_calls"]),
    }


def cold(repeats: int = 2000) -> dict:
    """log_softmax of a [4, V] step's logits after nothing, and after one decoder step at 4 rows (median, us)."""
    import numpy as np

    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.engine.engine import DecodingOptions, Engine
    from attnserve.service.engine.processors import log_softmax

    engine = Engine(load_bundle(h.ROOT / "models" / "g2p-en"), threads=1)
    batch = engine.new_batch()
    engine.join(batch, [(engine.encode_text(w), DecodingOptions()) for w in ("phonetics", "zebra", "attention", "cat")])
    logits = np.random.default_rng(0).standard_normal((4, engine.vocab_size)).astype(np.float32)

    def median_after(before) -> float:
        times = []
        for _ in range(repeats):
            before()
            t = time.perf_counter()
            log_softmax(logits)
            times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2] * 1e6

    # the batch keeps its four rows at position 0: each step rewrites the same cache slots
    warm = median_after(lambda: None)
    after_step = median_after(lambda: engine.run_step(batch))
    return {"log_softmax_4_rows_us": {"after_nothing": warm, "after_a_decoder_step": after_step}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server-repo", type=Path, default=h.ROOT)
    p.add_argument("--route", default="/generate_stream")
    p.add_argument("--clients", default="1,64", help="client counts, comma-separated")
    p.add_argument("--requests", type=int, default=4000, help="measured requests per client count")
    p.add_argument("--engine-bench", type=Path, help="an attnserve-bench report with the ort-int8 batch-32, 8-token cell")
    p.add_argument("--bench", action="store_true", help="measure that cell now, on core 0, after the server has gone")
    p.add_argument("--cold", action="store_true", help="also time the cold-cache effect in process")
    p.add_argument("--out", type=Path, help="directory of the raw JSON")
    args = p.parse_args()
    words = h.pseudo_words(600)
    result: dict = {"command": " ".join(["tax_parts.py", *h.portable_args(sys.argv[1:])]), "machine": machine()}
    result.update(server=h.checkout_name(args.server_repo), route=args.route, levels=[])
    with h.measured_server(args.server_repo, SITECUSTOMIZE, "TAX_PARTS_OUT") as (proc, url, out):
        for i, clients in enumerate(int(c) for c in args.clients.split(",")):
            result["levels"].append(level(url, proc.pid, args.route, words, clients, args.requests, out, 2 * i + 1))
    if args.engine_bench or args.bench:
        engine = h.engine_cpu_per_step(args.engine_bench)
        result["engine_bench"] = engine | {"command": " ".join(h.portable_args(engine["command"].split()))}
        per_word = engine["cpu_ms_per_step"] / 32 * (h.mean_generated_tokens(words) + 1)
        result["engine_ms_per_word"] = per_word
        for lv in result["levels"]:
            lv["share_of_engine_per_word"] = {k: v / per_word for k, v in lv["ms_per_request"].items()}
    if args.cold:
        result["cold"] = cold()
    for lv in result["levels"]:
        parts = ", ".join(f"{k} {v:.3f}" for k, v in lv["ms_per_request"].items())
        print(f"{args.route}, {lv['clients']} clients ({lv['answered']} answered), ms per request: {parts}")
        print(
            f"  {lv['steps_per_request']:.2f} steps a request at {lv['mean_rows_per_step']:.1f} rows, source width "
            f"{lv['mean_source_width']:.1f}, {lv['ms_per_decoder_step']:.3f} ms a step; "
            f"{lv['encoder_calls_per_request']:.3f} encoder calls a request of {lv['mean_words_per_encoder_call']:.1f} words"
        )
        if "share_of_engine_per_word" in lv:
            shares = ", ".join(f"{k} {v:.2f}" for k, v in lv["share_of_engine_per_word"].items())
            print(f"  as multiples of the engine's {result['engine_ms_per_word']:.3f} ms per word: {shares}")
    if "cold" in result:
        c = result["cold"]["log_softmax_4_rows_us"]
        print(
            f"log_softmax of 4 rows: {c['after_nothing']:.1f} us after nothing, {c['after_a_decoder_step']:.1f} us after a step"
        )
    if args.out:
        print(f"raw JSON: {write_report(args.out, 'tax_parts', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
