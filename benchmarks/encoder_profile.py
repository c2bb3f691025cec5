"""Where the served int8 encoder's time goes: ONNX Runtime's profiler per node, and the encoder with its set-up
against CTranslate2's, on the bench's synthetic model (the default model's shape, random weights).

    taskset -c 0 python -m benchmarks.encoder_profile --out benchmarks/results/encoder_profile.json

Per shape (batch x source length; `5-11`: each row's length drawn from 5 to 11, padded to the longest):
- `nodes`: the encoder graph's nodes as ONNX Runtime ran them, the time of each op type summed over the
  session's profile (`enable_profiling`), per call, largest first;
- `session_ms`: one `session.run` of the encoder alone (best of `--repeats`, by `--clock`);
- `start_ms`: `Engine.start`, the encoder with the engine's set-up around it (padding, the mask, slicing each
  row's cross K/V); `join_ms`: `Engine.join`, start plus the rows' slots written into a batch;
- `first_token_ms`: a whole generation of one token (encoder, set-up, one decoder step), served int8 against
  CTranslate2 int8's `translate_batch(max_decoding_length=1)` on the same weights: the encoder's cost as the
  bench's 8-token cells carry it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.export.bench import SIZES, machine_info, synthetic_run
from attnserve.service.engine.bundle import load_bundle
from attnserve.service.engine.engine import DecodingOptions, Engine
from attnserve.service.engine.names import ATTENTION_MASK, INPUT_IDS
from attnserve.service.engine.runtime import session_options

# (batch, source length): one length for every row, or (shortest, longest) for lengths drawn between them, the
# rows padded to the longest as the engine pads them.
SHAPES = ((1, 10), (32, 10), (32, 14), (32, (5, 11)))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def best_ms(fn, repeats: int, clock=time.perf_counter) -> float:
    fn()  # warm-up: arena growth for this shape
    best = float("inf")
    for _ in range(repeats):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return round(1000 * best, 4)


def padded_feeds(ids: list[list[int]]) -> dict[str, np.ndarray]:
    """input_ids and attention_mask [B, S] for rows `ids`, right-padded with 0 to the longest as Engine.start pads."""
    width = max(map(len, ids))
    feeds = {INPUT_IDS: np.zeros((len(ids), width), np.int64), ATTENTION_MASK: np.zeros((len(ids), width), np.int64)}
    for i, row in enumerate(ids):
        feeds[INPUT_IDS][i, : len(row)] = row
        feeds[ATTENTION_MASK][i, : len(row)] = 1
    return feeds


def node_profile(path: Path, feeds: dict, calls: int, work: Path) -> list[dict]:
    """Op types by time per call in ONNX Runtime's own profile of `calls` runs (after one warm-up run)."""
    so = session_options(threads=1)
    so.enable_profiling = True
    so.profile_file_prefix = str(work / "encoder_profile")
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    for _ in range(calls):
        session.run(None, feeds)
    trace = json.loads(Path(session.end_profiling()).read_text())
    by_op: dict[str, list[float]] = defaultdict(list)
    for ev in trace:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            by_op[ev["args"]["op_name"]].append(ev["dur"])
    total = sum(sum(v) for v in by_op.values())
    rows = [
        {
            "op": op,
            "nodes": len(durs) // (calls + 1),
            "us_per_call": round(sum(durs) / (calls + 1), 2),
            "share": round(sum(durs) / total, 3),
        }
        for op, durs in by_op.items()
    ]
    return sorted(rows, key=lambda r: -r["us_per_call"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.encoder_profile", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=50, help="timed runs per figure (best kept)")
    p.add_argument("--calls", type=int, default=100, help="profiled encoder runs per shape")
    p.add_argument("--no-ct2", action="store_true", help="skip CTranslate2 (it needs the dev extra)")
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: the process's CPU time, which a shared machine's other work does not inflate",
    )
    p.add_argument("--out", type=Path, default=Path("encoder_profile.json"))
    args = p.parse_args(argv)
    report = {"command": "python -m benchmarks.encoder_profile", "clock": args.clock, "machine": machine_info(1), "shapes": []}
    clock = CLOCKS[args.clock]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        model, bundle_dir = synthetic_run(Path(tmp) / "bundle", size=SIZES["default"])
        engine = Engine(load_bundle(bundle_dir), variant="int8", provider="cpu", threads=1)
        enc_path = bundle_dir / engine.bundle.variants["int8"]["encoder"]
        translator = None
        if not args.no_ct2:
            from attnserve.export import ct2

            src_tok = Tokenizer.from_file(str(bundle_dir / "src_tokenizer.json"))
            tgt_tok = Tokenizer.from_file(str(bundle_dir / "tgt_tokenizer.json"))
            translator = ct2.translator(ct2.convert(model, src_tok, tgt_tok, Path(tmp) / "ct2", "int8"), 1)
        src_v = int(engine.bundle.config["src_vocab_size"])
        one = DecodingOptions(max_new_tokens=1, min_new_tokens=1)
        for b, s in SHAPES:
            lengths = [s] * b if isinstance(s, int) else rng.integers(s[0], s[1] + 1, b).tolist()
            ids = [rng.integers(4, src_v, n).tolist() for n in lengths]
            feeds = padded_feeds(ids)
            items = [(x, one) for x in ids]
            row = {"batch": b, "source_len": s if isinstance(s, int) else f"{s[0]}-{s[1]}"}
            row["session_ms"] = best_ms(lambda f=feeds: engine.encoder.run(None, f), args.repeats, clock)
            row["start_ms"] = best_ms(lambda it=items: engine.start(it), args.repeats, clock)
            row["join_ms"] = best_ms(lambda it=items: engine.join(engine.new_batch(), it), args.repeats, clock)
            first = best_ms(lambda x=ids, n=b: engine.generate(x, one, batch_size=n), args.repeats, clock)
            row["first_token_ms"] = {"ort-int8": first}
            if translator is not None:
                row["first_token_ms"]["ct2-int8"] = best_ms(
                    lambda x=ids: ct2.generate(translator, src_tok, tgt_tok, x, 1, min_len=1), args.repeats, clock
                )
            row["nodes"] = node_profile(enc_path, feeds, args.calls, Path(tmp))
            report["shapes"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "nodes"}))
            for n in row["nodes"][:8]:
                print(f"    {n['op']:28s} x{n['nodes']:3d} {n['us_per_call']:9.1f} us {100 * n['share']:5.1f}%")
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
