"""Served int8 against CTranslate2 int8, cell by cell, from sets of `attnserve-bench` reports: each run's ratio of
the best round's CPU time of the process (CTranslate2's threads included) and of wall time, and the best of the
runs. One set per glob pattern, so an A B A B series (before_r*, after_r*) reads side by side.

    python -m benchmarks.best_ratios 'benchmarks/results/beam_vectorised/series1_beam_before_r*.json' \
        'benchmarks/results/beam_vectorised/series1_beam_after_r*.json'
"""

from __future__ import annotations

import glob
import json
import sys


def cells(path: str) -> tuple[dict[tuple[int, int], tuple[float, float]], float]:
    """{(batch, output len): (CPU-time ratio, wall-time ratio)} of one report, and its load average at start."""
    report = json.load(open(path))
    by_key = {(x["backend"], x["batch"], x["output_len"]): x for x in report["results"]}
    out = {}
    for (backend, b, n), x in by_key.items():
        if backend == "ort-int8" and ("ct2-int8", b, n) in by_key:
            d = by_key[("ct2-int8", b, n)]
            out[(b, n)] = (d["cpu_seconds_best"] / x["cpu_seconds_best"], d["seconds_best"] / x["seconds_best"])
    return out, report["machine"]["load_average_at_start"][0]


def main(patterns: list[str]) -> None:
    for pattern in patterns:
        runs = [cells(f) for f in sorted(glob.glob(pattern))]
        print(f"{pattern}: {len(runs)} run(s), load average at start {[round(load, 1) for _, load in runs]}")
        for key in sorted(runs[0][0], key=lambda k: (k[1], k[0])):
            cpu = [r[key][0] for r, _ in runs]
            wall = [r[key][1] for r, _ in runs]
            print(
                f"  batch {key[0]:3d} len {key[1]:4d}: CPU {' '.join(f'{x:.2f}' for x in cpu)} (best {max(cpu):.2f})"
                f" | wall {' '.join(f'{x:.2f}' for x in wall)} (best {max(wall):.2f})"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
