"""`attnserve-loadtest URL`: latency of a TGI-style server (streaming, or not with --no-stream) under a
concurrency sweep or fixed arrival rates."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from tqdm import tqdm

from attnserve.loadtest import report
from attnserve.loadtest.client import GenerationParams, open_session
from attnserve.loadtest.inputs import InputError, load_inputs
from attnserve.loadtest.runner import Level, Sender, Target, run_level
from attnserve.loadtest.samples import NoSamples, failed_levels, server_samples
from attnserve.loadtest.stats import ITL_FORMULA, SloError, parse_slo, summarize

EPILOG = f"""\
Each level first sends its warm-up requests (not counted), then is measured
for --requests N requests or --duration S seconds (whichever ends first when
both are given). {ITL_FORMULA}. Latencies count from when a request was due:
in open-loop mode that is its scheduled Poisson arrival, so a server that
falls behind is not hidden by the client waiting (no coordinated omission).

examples:
  attnserve-loadtest http://127.0.0.1:8000 --concurrency 1,4,16,64 --requests 200
  attnserve-loadtest http://127.0.0.1:8000 --rate 5,20,50 --duration 30 --slo ttft_ms=100,e2e_ms=500
  attnserve-loadtest http://127.0.0.1:8000 --no-stream --concurrency 64 --requests 2000   # POST /generate
  attnserve-loadtest http://127.0.0.1:8000 --api openai --concurrency 1,16 --requests 200  # POST /v1/completions
"""


def _positive_list(kind, name: str):
    def parse(text: str):
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: expected comma-separated numbers, got {text!r}") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{name}: every value must be > 0, got {text!r}")
        return values

    return parse


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnserve-loadtest",
        description="Load-test a server that speaks TGI's /generate_stream API: TTFT, inter-token latency, "
        "end-to-end latency, throughput, errors and goodput per load level.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--concurrency",
        type=_positive_list(int, "--concurrency"),
        help="closed loop: comma-separated numbers of concurrent clients (default 1,4,16,64)",
    )
    shape.add_argument(
        "--rate", type=_positive_list(float, "--rate"), help="open loop: comma-separated Poisson arrival rates, requests/s"
    )
    p.add_argument("--requests", type=_positive(int), help="measured requests per level")
    p.add_argument("--duration", type=_positive(float), help="measured seconds per level (answers in flight are awaited)")
    p.add_argument(
        "--warmup",
        type=int,
        help="warm-up requests per level, not counted (default: one per client; open loop: one second of arrivals)",
    )
    p.add_argument(
        "--input",
        type=Path,
        help="file of inputs, one per line (default: the server's GET /samples, inputs of its model's own task; "
        "a server without it needs --input)",
    )
    p.add_argument("--max-new-tokens", type=_positive(int), help="TGI max_new_tokens (default: the server's)")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=_positive(float))
    p.add_argument("--top-k", type=_positive(int))
    p.add_argument("--top-p", type=_positive(float))
    p.add_argument("--seed", type=int, default=0, help="request i sends seed+i when sampling; also seeds the arrivals")
    p.add_argument(
        "--allow-lexicon",
        action="store_true",
        help="let the bundle's lexicon answer known inputs (default: send lexicon=false, so the model answers every one)",
    )
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY' (default: $ATTNSERVE_API_KEY)")
    p.add_argument("--timeout", type=_positive(float), default=60.0, help="seconds a request may take, from when it was due")
    p.add_argument("--slo", help="goodput counts requests meeting all of e.g. ttft_ms=200,itl_ms=50,e2e_ms=1000")
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=0.01,
        help="exit non-zero when a level's share of failed requests is above this, showing the first failures "
        "(default 0.01; 1 accepts any, e.g. to count 429s past the server's bound)",
    )
    p.add_argument(
        "--no-stream",
        action="store_true",
        help="send non-streaming requests (default endpoint /generate): end-to-end latency only, no TTFT or ITL",
    )
    p.add_argument(
        "--api",
        choices=["tgi", "openai"],
        default="tgi",
        help="tgi: TGI's /generate_stream (default); openai: OpenAI's /v1/completions, streamed with usage",
    )
    p.add_argument("--model", help="--api openai: the `model` to send (default: the first of GET /v1/models)")
    p.add_argument(
        "--endpoint",
        help="generation route (default /generate_stream, /generate with --no-stream, /v1/completions with --api openai)",
    )
    p.add_argument("--no-metrics", action="store_true", help="do not scrape URL/metrics before and after each level")
    p.add_argument("--out", type=Path, help="directory for results.json, CSVs and plots (default loadtest-results/TIME)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--no-records", action="store_true", help="leave the per-request records out of results.json (requests.csv has them)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--baseline", type=Path, help="results.json of an earlier run: print throughput and p99 ratios per level")
    p.add_argument("--label", help="free text stored in results.json (e.g. what the server ran with)")
    return p


def _progress_factory(enabled: bool, label: str):
    def make(total: int | None):
        bar = tqdm(total=total, desc=label, unit="req", file=sys.stderr, disable=None if enabled else True)
        return (lambda: bar.update(1)), bar.close

    return make


async def _server_info(client: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> dict | str:
    """GET /info (attnserve and TGI both have it); a string saying why when it fails.

    Raises ConnectionError when nothing answers at `base`: no point in a sweep of connection errors.
    """
    try:
        async with client.get(base + "/info", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            try:
                return await resp.json(content_type=None)
            except ValueError:
                return "not JSON"
    except (aiohttp.ClientConnectorError, TimeoutError) as e:
        raise ConnectionError(f"cannot reach {base}: {type(e).__name__}: {e}") from None
    except aiohttp.ClientError as e:
        return f"{type(e).__name__}: {e}"


async def _served_model(client: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> str:
    """The first model of GET /v1/models (OpenAI's API); ConnectionError saying why when there is none."""
    try:
        async with client.get(base + "/v1/models", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            body = await resp.json(content_type=None) if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        raise ConnectionError(f"GET {base}/v1/models failed: {type(e).__name__}: {e}; give --model") from None
    models = body.get("data") if isinstance(body, dict) else None
    if not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise ConnectionError(f"GET {base}/v1/models named no model; give --model")
    return models[0]["id"]


async def run(args, levels: list[Level], inputs: list[str] | None, slo: dict, result: dict) -> None:
    """Run every level, appending each finished one to result["levels"] (kept if interrupted). `inputs` None: the
    server's GET /samples (NoSamples when it has none)."""
    base = args.url.rstrip("/")
    api_key = args.api_key or os.environ.get("ATTNSERVE_API_KEY")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    params = GenerationParams(
        max_new_tokens=args.max_new_tokens,
        do_sample=args.do_sample,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed if args.do_sample else None,
        lexicon=args.allow_lexicon,
    )
    target = Target(
        url=base + args.endpoint,
        metrics_url=None if args.no_metrics else base + "/metrics",
        headers=headers,
        inputs=inputs or [],
        params=params,
        timeout_s=args.timeout,
        stream=not args.no_stream,
    )
    result["config"]["parameters"] = params.payload("", 0)["parameters"]
    async with open_session(connect_timeout_s=min(args.timeout, 10.0)) as client:
        info = await _server_info(client, base, headers)
        result["server_info"] = info if isinstance(info, dict) else {"unavailable": info}
        if inputs is None:
            target.inputs, source = await server_samples(client, base, headers)
            result["config"]["inputs"], result["config"]["n_inputs"] = source, len(target.inputs)
        if args.api == "openai":
            target.api = "openai"
            target.model = args.model or await _served_model(client, base, headers)
            body = params.openai_payload("", 0, target.model, target.stream)
            result["config"]["parameters"] = {k: v for k, v in body.items() if k != "prompt"}
        sender = Sender(client, target)
        for i, level in enumerate(levels):
            warmup = level.default_warmup() if args.warmup is None else args.warmup
            records, window, server = await run_level(
                sender,
                level,
                requests=args.requests,
                duration_s=args.duration,
                warmup=warmup,
                seed=args.seed + i,
                progress=_progress_factory(not args.no_progress, level.label),
            )
            summary = summarize(records, window, slo)
            result["levels"].append(
                {
                    "mode": level.mode,
                    "value": level.value,
                    "label": level.label,
                    "warmup_requests": warmup,
                    "summary": summary,
                    "server": server,
                    "records": [r.as_dict() for r in records],
                }
            )
            s = summary
            print(
                f"[loadtest] {level.label}: {s['ok']} ok, {s['failed']} failed, {s['requests_per_s']:.2f} req/s, "
                f"{s['output_tokens_per_s']:.1f} tok/s",
                file=sys.stderr,
            )
            if s["small_sample"]:
                print(f"[loadtest] warning: {level.label}: {s['small_sample']}", file=sys.stderr)


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict, list[str] | None, str | None, dict | None]:
    """The flags, checked (a bad one exits with argparse's usage error), and what they name loaded:
    (args with its endpoint filled in, the SLO, the inputs and where they came from, the baseline results)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.requests is None and args.duration is None:
        parser.error("give --requests N or --duration S (or both): every level must stop by itself")
    if args.warmup is not None and args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if not 0 <= args.max_error_rate <= 1:
        parser.error(f"--max-error-rate must be between 0 and 1, got {args.max_error_rate:g}")
    if args.endpoint is None:
        args.endpoint = "/v1/completions" if args.api == "openai" else "/generate" if args.no_stream else "/generate_stream"
    if args.model is not None and args.api != "openai":
        parser.error("--model is for --api openai")
    if not args.endpoint.startswith("/"):
        parser.error("--endpoint must start with '/'")
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"URL must start with http:// or https://, got {args.url!r}")
    try:
        slo = parse_slo(args.slo)
        inputs, source = load_inputs(args.input) if args.input is not None else (None, None)
    except (SloError, InputError) as e:
        parser.error(str(e))
    baseline = None
    if args.baseline is not None:
        try:
            baseline = json.loads(args.baseline.read_text())
        except (OSError, ValueError) as e:
            parser.error(f"--baseline {args.baseline}: {e}")
    return args, slo, inputs, source, baseline


def _new_result(
    args: argparse.Namespace, argv: list[str] | None, levels: list[Level], slo: dict, inputs: list[str] | None, source: str | None
) -> dict:
    """results.json before any level has run: the tool, the command, the client host and the run's configuration."""
    return {
        "tool": "attnserve-loadtest",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": ["attnserve-loadtest", *(sys.argv[1:] if argv is None else argv)],
        "label": args.label,
        "url": args.url,
        "itl_definition": ITL_FORMULA,
        "client_host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "config": {
            "mode": levels[0].mode,
            "levels": [lv.value for lv in levels],
            "requests_per_level": args.requests,
            "duration_s_per_level": args.duration,
            "timeout_s": args.timeout,
            "inputs": source,
            "n_inputs": len(inputs) if inputs is not None else None,
            "slo": slo or None,
            "endpoint": args.endpoint,
            "api": args.api,
            "stream": not args.no_stream,
        },
        "levels": [],
    }


def _run_levels(args: argparse.Namespace, levels: list[Level], inputs: list[str] | None, slo: dict, result: dict) -> int:
    """Run every level into `result`; -> 0, 130 when interrupted (the finished levels are still reported),
    1 when the server cannot be reached, 2 when it offers no samples and no --input was given (both: nothing to report)."""
    status = 0
    t0 = time.perf_counter()
    try:
        asyncio.run(run(args, levels, inputs, slo, result))
    except ConnectionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except NoSamples as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: reporting the levels that finished", file=sys.stderr)
        status = 130
    result["wall_s"] = time.perf_counter() - t0
    return status


def _report(args: argparse.Namespace, result: dict, baseline: dict | None, out_dir: Path, status: int) -> int:
    """The summary (and the comparison with the baseline) on stdout, the files in `out_dir`, the failures on stderr;
    -> the exit status."""
    levels_done = result["levels"]
    print(report.summary_text(levels_done))
    failing = failed_levels(levels_done, args.max_error_rate)
    if baseline is not None:
        result["comparison"] = {"baseline": str(args.baseline), "levels": report.comparison(levels_done, baseline)}
        print()
        print(report.comparison_text(result["comparison"]["levels"], str(args.baseline)))
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.no_records:
        result = result | {"levels": [{k: v for k, v in lv.items() if k != "records"} for lv in levels_done]}
    report.write_json(out_dir / "results.json", result)
    report.write_csv(out_dir, levels_done)
    written = [out_dir / "results.json", out_dir / "summary.csv", out_dir / "requests.csv"]
    if not args.no_plots:
        plots = report.write_plots(out_dir, levels_done)
        if isinstance(plots, str):
            print(plots, file=sys.stderr)
        else:
            written += plots
    print(f"\nwritten: {', '.join(str(p) for p in written)}", file=sys.stderr)
    if status == 0 and failing:
        print("error: " + "\n".join(failing), file=sys.stderr)
    if status == 0 and levels_done and not any(lv["summary"]["ok"] for lv in levels_done):
        samples = {k: v for lv in levels_done for k, v in lv["summary"]["error_samples"].items()}
        print(f"error: no request succeeded; first errors: {samples}", file=sys.stderr)
        return 1
    return 1 if status == 0 and failing else status


def main(argv: list[str] | None = None) -> int:
    """`attnserve-loadtest`: check the flags, run the levels, report; -> the exit status."""
    args, slo, inputs, source, baseline = _parse_args(argv)
    if args.rate:
        levels = [Level("open", r) for r in args.rate]
    else:
        levels = [Level("closed", c) for c in (args.concurrency or [1, 4, 16, 64])]
    out_dir = args.out or Path("loadtest-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    result = _new_result(args, argv, levels, slo, inputs, source)
    status = _run_levels(args, levels, inputs, slo, result)
    if status in (1, 2):  # no server, or no inputs to send: nothing measured to report
        return status
    return _report(args, result, baseline, out_dir, status)
