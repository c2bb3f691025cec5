"""What a run leaves behind: a summary table on stdout, results.json, CSV files and PNG plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from attnserve.loadtest.client import ERROR_KIND_HELP, ERROR_KINDS
from attnserve.loadtest.stats import ITL_FORMULA

LATENCIES = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("e2e_ms", "e2e"))
STATS = ("mean", "p50", "p90", "p99")


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def summary_text(levels: list[dict]) -> str:
    """The readable summary: throughput and errors, then each latency as mean/p50/p90/p99 per level."""
    if not levels:
        return "no level completed"
    out = []
    header = ["level", "ok", "failed", "req/s", "tok/s", "goodput/s"] + [ERROR_KIND_HELP[k][0] for k in ERROR_KINDS]
    rows = []
    for lv in levels:
        s = lv["summary"]
        rows.append(
            [lv["label"], str(s["ok"]), str(s["failed"]), _fmt(s["requests_per_s"], 2), _fmt(s["output_tokens_per_s"], 1)]
            + [_fmt(s["goodput_per_s"], 2)]
            + [str(s["errors"][k]) for k in ERROR_KINDS]
        )
    out.append(_table(header, rows) + "\nerrors: " + "; ".join(f"{short} = {long}" for short, long in ERROR_KIND_HELP.values()))
    header = ["level"] + [f"{name} {st}" for _, name in LATENCIES for st in STATS]
    rows = []
    for lv in levels:
        s = lv["summary"]
        rows.append([lv["label"]] + [_fmt((s[key] or {}).get(st)) for key, _ in LATENCIES for st in STATS])
    out.append("latency in ms; " + ITL_FORMULA)
    out.append(_table(header, rows))
    rows = []
    for lv in levels:
        srv = lv["server"]
        if not srv.get("available"):
            rows.append([lv["label"], f"unavailable: {srv.get('reason')}"] + [""] * 5)
            continue
        q, b, t, g = srv.get("queue_ms") or {}, srv.get("batch_size") or {}, srv.get("ttft_ms") or {}, srv.get("itl_ms") or {}
        rows.append(
            [
                lv["label"],
                _fmt(q.get("mean")),
                _fmt(q.get("p99_est")),
                _fmt(b.get("mean"), 2),
                _fmt(t.get("mean")),
                _fmt(g.get("mean"), 2),
                _fmt((srv.get("generated_tokens") or {}).get("sum"), 0),
            ]
        )
    out.append("server-side, from /metrics before and after each level (p99 estimated from histogram buckets)")
    header = ["level", "queue mean ms", "queue p99 ms", "batch mean", "TTFT mean ms", "ITL mean ms", "gen. tokens"]
    out.append(_table(header, rows))
    warn = [lv["label"] for lv in levels if (lv["summary"]["client_send_lag_ms"] or {}).get("p99", 0) > 10]
    if warn:
        out.append(
            f"note: the load client sent late (p99 lag > 10 ms) at {', '.join(warn)}; those latencies include "
            "the client's own delay: give the client its own core (taskset) or lower the load"
        )
    small = [f"{lv['label']}: {lv['summary']['small_sample']}" for lv in levels if lv["summary"].get("small_sample")]
    if small:
        out.append("warning: a small sample\n" + "\n".join(f"  {line}" for line in small))
    return "\n\n".join(out)


def comparison(levels: list[dict], baseline: dict) -> list[dict]:
    """Ratios of this run to a baseline results.json at each level both have (throughput up is better, p99 down)."""
    base = {(lv["mode"], lv["value"]): lv["summary"] for lv in baseline.get("levels", [])}
    rows = []
    for lv in levels:
        b = base.get((lv["mode"], lv["value"]))
        if b is None:
            continue
        s = lv["summary"]

        def ratio(x, y):
            return None if x is None or not y else x / y

        rows.append(
            {
                "label": lv["label"],
                "throughput_ratio": ratio(s["output_tokens_per_s"], b["output_tokens_per_s"]),
                "requests_ratio": ratio(s["requests_per_s"], b["requests_per_s"]),
                "e2e_p99_ratio": ratio((s["e2e_ms"] or {}).get("p99"), (b["e2e_ms"] or {}).get("p99")),
                "ttft_p99_ratio": ratio((s["ttft_ms"] or {}).get("p99"), (b["ttft_ms"] or {}).get("p99")),
            }
        )
    return rows


def comparison_text(rows: list[dict], baseline_path: str) -> str:
    header = ["level", "tok/s ratio", "req/s ratio", "e2e p99 ratio", "TTFT p99 ratio"]
    body = [
        [r["label"]] + [_fmt(r[k], 2) for k in ("throughput_ratio", "requests_ratio", "e2e_p99_ratio", "ttft_p99_ratio")]
        for r in rows
    ]
    if not body:
        return f"baseline {baseline_path}: no level in common"
    return f"this run / baseline {baseline_path}\n" + _table(header, body)


def write_json(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result, indent=2) + "\n")


def write_csv(out_dir: Path, levels: list[dict]) -> None:
    """summary.csv (one row per level) and requests.csv (one row per measured request)."""
    with open(out_dir / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        lat_cols = [f"{key}_{st}" for key, _ in LATENCIES for st in STATS]
        w.writerow(
            ["mode", "level", "requests", "ok", "failed", "window_s", "requests_per_s", "output_tokens_per_s", "goodput_per_s"]
            + lat_cols
            + [f"errors_{k}" for k in ERROR_KINDS]
            + ["server_queue_ms_mean", "server_batch_size_mean"]
        )
        for lv in levels:
            s, srv = lv["summary"], lv["server"]
            w.writerow(
                [lv["mode"], lv["value"], s["requests"], s["ok"], s["failed"], s["window_s"], s["requests_per_s"]]
                + [s["output_tokens_per_s"], s["goodput_per_s"]]
                + [(s[key] or {}).get(st) for key, _ in LATENCIES for st in STATS]
                + [s["errors"][k] for k in ERROR_KINDS]
                + [(srv.get("queue_ms") or {}).get("mean"), (srv.get("batch_size") or {}).get("mean")]
            )
    with open(out_dir / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        cols = ["index", "due_s", "sent_s", "done_s", "ok", "status", "error_kind", "ttft_s", "itl_s", "e2e_s", "output_tokens"]
        w.writerow(["mode", "level"] + cols)
        for lv in levels:
            for r in lv["records"]:
                w.writerow([lv["mode"], lv["value"]] + [r.get(c) for c in cols])


def write_plots(out_dir: Path, levels: list[dict]) -> list[Path] | str:
    """Latency percentiles against throughput, TTFT and ITL distributions; a message if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from attnserve.service.extras import install_command

        return f"plots skipped: matplotlib is not installed (the 'loadtest' extra: {install_command('loadtest')})"
    done = [lv for lv in levels if lv["summary"]["ok"]]
    if not done:
        return "plots skipped: no successful request"
    paths = []

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    x = [lv["summary"]["requests_per_s"] for lv in done]
    for ax, (key, name) in zip(axes, LATENCIES):
        for st, style in (("p50", "o-"), ("p90", "s--"), ("p99", "^:")):
            ax.plot(x, [(lv["summary"][key] or {}).get(st, float("nan")) for lv in done], style, label=st)
        for lv, xi in zip(done, x):
            ax.annotate(lv["label"], (xi, (lv["summary"][key] or {}).get("p99", 0) or 0), fontsize=7, alpha=0.7)
        ax.set_xlabel("throughput (successful requests/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} percentiles vs throughput")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "latency_vs_throughput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for key, name, field in (("ttft", "TTFT", "ttft_s"), ("itl", "ITL", "itl_s")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        per_level = [(lv["label"], [r[field] * 1000 for r in lv["records"] if r[field] is not None]) for lv in done]
        everything = [v for _, vals in per_level for v in vals]
        plotted = bool(everything)
        if plotted:
            # one set of bin edges for every level, so the shapes compare
            lo, hi = min(everything), max(everything)
            edges = [lo + (hi - lo) * i / 40 for i in range(41)] if hi > lo else 1
            for label, vals in per_level:
                if vals:
                    ax.hist(vals, bins=edges, histtype="step", linewidth=1.5, label=label)
        if not plotted:
            ax.text(0.5, 0.5, f"no {name} values (one-token or non-streamed answers)", ha="center", transform=ax.transAxes)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests")
        title = f"{name} distribution per level"
        ax.set_title(title if key == "ttft" else title + "\n" + ITL_FORMULA.split(", per")[0], fontsize=10)
        ax.grid(alpha=0.3)
        if plotted:
            ax.legend()
        fig.tight_layout()
        paths.append(out_dir / f"{key}_distribution.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
