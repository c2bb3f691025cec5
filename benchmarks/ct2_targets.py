"""The engine against CTranslate2, cell by cell, from `attnserve-bench` reports: the ratios the
batch-invariance and step-speed issue sets as targets, each a median of interleaved rounds.

    python -m benchmarks.ct2_targets benchmarks/results/engine_ct2_threads1.json benchmarks/results/engine_ct2_threads2.json \
        [--beam benchmarks/results/engine_ct2_beam4.json]

Ratios are tokens/s over tokens/s (>= 1.0: the engine is as fast or faster). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# (column, numerator backend, denominator backend, the target, where it applies: "all", 1 or 32)
TARGETS = [
    ("ort-int8 / ct2-fp32", "ort-int8", "ct2-fp32", 1.0, "all"),
    ("ort-int8 / ct2-int8", "ort-int8", "ct2-int8", 0.8, 1),
    ("ort-int8 / ct2-int8", "ort-int8", "ct2-int8", 1.0, 32),
    ("ort-fp32 / ct2-fp32", "ort-fp32", "ct2-fp32", 1.0, 32),
]


def medians(report: dict) -> dict[tuple[str, int, int], float]:
    """tokens/s from each cell's median round, by (backend, batch, output length)."""
    out = {}
    for r in report["results"]:
        out[(r["backend"], r["batch"], r["output_len"])] = r["batch"] * r["output_len"] / r["seconds_median"]
    return out


def target_for(column: str, batch: int) -> float | None:
    for name, _, _, target, where in TARGETS:
        if name == column and (where == "all" or where == batch):
            return target
    return None


def table(report: dict) -> list[str]:
    tps = medians(report)
    cells = sorted({(b, n) for _, b, n in tps})
    columns = list(dict.fromkeys((name, num, den) for name, num, den, _, _ in TARGETS))
    head = "| threads | batch | output len | " + " | ".join(c[0] for c in columns) + " |"
    rows = [head, "|" + "---|" * (3 + len(columns))]
    threads = report["machine"]["threads_used"]
    for b, n in cells:
        out = []
        for name, num, den in columns:
            if (num, b, n) not in tps or (den, b, n) not in tps:
                out.append("-")
                continue
            ratio = tps[(num, b, n)] / tps[(den, b, n)]
            target = target_for(name, b)
            mark = "" if target is None else (" (met)" if ratio >= target else f" (**short of {target:.1f}**)")
            out.append(f"{ratio:.2f}{mark}")
        rows.append(f"| {threads} | {b} | {n} | " + " | ".join(out) + " |")
    return rows


def flat_cost(report: dict, backend: str = "ort-int8") -> list[str]:
    """Cost per token at the longest output over that at the shortest (target <= 1.3 at batch 1)."""
    tps = medians(report)
    lines = []
    for b in sorted({b for k, b, _ in tps if k == backend}):
        lens = sorted(n for k, bb, n in tps if k == backend and bb == b)
        if len(lens) > 1:
            short, long_ = tps[(backend, b, lens[0])], tps[(backend, b, lens[-1])]
            lines.append(f"{backend}, batch {b}: cost per token at {lens[-1]} tokens / at {lens[0]} = {short / long_:.2f}")
    return lines


def beam_table(report: dict) -> list[str]:
    tps = medians(report)
    rows = ["| precision | batch | output len | ort / ct2 (beam) |", "|---|---|---|---|"]
    for precision in ("fp32", "int8"):
        for b, n in sorted({(b, n) for k, b, n in tps if k == f"ort-{precision}"}):
            if (f"ct2-{precision}", b, n) in tps:
                ratio = tps[(f"ort-{precision}", b, n)] / tps[(f"ct2-{precision}", b, n)]
                rows.append(f"| {precision} | {b} | {n} | {ratio:.2f}{'' if ratio >= 1.0 else ' (**short of 1.0**)'} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="*", type=Path, help="attnserve-bench JSON reports (greedy)")
    p.add_argument("--beam", type=Path, help="an attnserve-bench --beam report")
    args = p.parse_args()
    if not args.reports and not args.beam:
        p.error("give at least one report, or --beam REPORT")
    for path in args.reports:
        report = json.loads(path.read_text())
        m = report["machine"]
        print(f"\n{path.name}: {m['cpu']}, {m['threads_used']} thread(s), load {m['load_average_at_start'][0]:.2f} at start")
        print("\n".join(table(report)))
        print("\n".join(flat_cost(report)))
    if args.beam:
        report = json.loads(args.beam.read_text())
        print(f"\n{args.beam.name}: beam {report.get('beam_size', '?')}")
        print("\n".join(beam_table(report)))


if __name__ == "__main__":
    main()
