"""The same single-request figures without HTTP: `python -m attnserve.loadtest.inprocess BUNDLE`.

Runs the server's own engine and scheduler in this process (`attnserve.service.client.Generator`),
one request at a time over the same inputs, and times each token as it leaves
the scheduler. Compared with `attnserve-loadtest URL --concurrency 1`, the
difference of the p50s is what HTTP (routing, JSON, SSE, the client) adds:

    python -m attnserve.loadtest.inprocess BUNDLE --requests 300 --compare RUN/results.json

Needs the serving dependencies (onnxruntime), not torch; the HTTP load tester
itself never imports this module.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from attnserve.loadtest.client import RequestRecord
from attnserve.loadtest.inputs import InputError, load_inputs
from attnserve.loadtest.stats import ITL_FORMULA, summarize


def measure(bundle: Path, inputs: list[str] | None, requests: int, warmup: int, max_new_tokens: int | None, threads: int) -> dict:
    """Greedy requests one after another; the summary has the shape of a load-test level's. `inputs` None: the
    bundle's samples, as its server's GET /samples offers them (what attnserve-loadtest sends without --input)."""
    from attnserve.service.client import Generator

    params = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    records: list[RequestRecord] = []
    with Generator(bundle, threads=threads) as g:
        inputs = inputs or g.samples()
        if not inputs:
            raise InputError(f"{bundle} has no parity corpus to take sample inputs from: give --input FILE")
        for i in range(warmup):
            g.generate(inputs[i % len(inputs)], **params)
        start = time.perf_counter()
        for i in range(requests):
            due = time.perf_counter()
            first = None
            tokens = 0
            for _ in g.stream(inputs[i % len(inputs)], **params):
                tokens += 1  # one per streamed event, end token included, as over HTTP
                first = first if first is not None else time.perf_counter()
            done = time.perf_counter()
            records.append(
                RequestRecord(
                    index=i,
                    due_s=due - start,
                    sent_s=due - start,
                    done_s=done - start,
                    ok=True,
                    ttft_s=first - due,
                    e2e_s=done - due,
                    output_tokens=tokens,
                )
            )
        model_id = g.engine.bundle.model_id
    window = records[-1].done_s if records else 0.0
    return {"model_id": model_id, "summary": summarize(records, window, {}), "records": [r.as_dict() for r in records]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnserve.loadtest.inprocess", description=__doc__.split("\n\n")[1])
    p.add_argument("bundle", type=Path)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument(
        "--input", type=Path, help="file of inputs, one per line (default: the bundle's samples, as GET /samples offers them)"
    )
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads (give the server the same)")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    p.add_argument("--no-records", action="store_true", help="leave the per-request records out of --out")
    p.add_argument("--compare", type=Path, help="results.json of an HTTP run at concurrency 1: print HTTP minus in-process")
    args = p.parse_args(argv)
    if args.requests <= 0 or args.warmup < 0:
        p.error("--requests must be > 0 and --warmup >= 0")
    try:
        inputs, source = load_inputs(args.input) if args.input is not None else (None, "the bundle's samples (GET /samples)")
        result = measure(args.bundle, inputs, args.requests, args.warmup, args.max_new_tokens, args.threads)
    except InputError as e:
        p.error(str(e))
    result |= {"bundle": str(args.bundle), "inputs": source, "threads": args.threads, "max_new_tokens": args.max_new_tokens}
    result["command"] = ["python", "-m", "attnserve.loadtest.inprocess", *(sys.argv[1:] if argv is None else argv)]
    s = result["summary"]
    print(f"in-process, one request at a time, {s['ok']} requests; {ITL_FORMULA}")
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        d = s[key]
        print(f"  {key:7s} mean {d['mean']:8.2f}  p50 {d['p50']:8.2f}  p90 {d['p90']:8.2f}  p99 {d['p99']:8.2f}")
    if args.compare:
        http = json.loads(args.compare.read_text())
        level = next((lv for lv in http["levels"] if lv["mode"] == "closed" and lv["value"] == 1), None)
        if level is None:
            p.error(f"--compare {args.compare}: no concurrency-1 level")
        overhead = {key: level["summary"][key]["p50"] - s[key]["p50"] for key in ("ttft_ms", "e2e_ms")}
        result["http_overhead_p50_ms"] = overhead | {"http_results": str(args.compare)}
        print(f"HTTP minus in-process, p50: TTFT {overhead['ttft_ms']:+.2f} ms, e2e {overhead['e2e_ms']:+.2f} ms")
    if args.no_records:
        del result["records"]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
