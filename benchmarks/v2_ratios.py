"""The served int8 (v2 decoder) and the v1 int8 against CTranslate2 int8, cell by cell, from `attnserve-bench`
reports of one or more runs: tokens/s ratios from the median wall-time round, and from the process's CPU time
(best round), which a busy shared machine disturbs less. Median over the runs given.

    python -m benchmarks.v2_ratios benchmarks/results/v2_round8/greedy_t1_r*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def ratios(report: dict, num: str, den: str) -> dict[tuple[int, int], tuple[float, float]]:
    cells = {(r["backend"], r["batch"], r["output_len"]): r for r in report["results"]}
    out = {}
    for (backend, b, n), r in cells.items():
        if backend == num and (den, b, n) in cells:
            d = cells[(den, b, n)]
            out[(b, n)] = (d["seconds_median"] / r["seconds_median"], d["cpu_seconds_best"] / r["cpu_seconds_best"])
    return out


def main(paths: list[str]) -> None:
    reports = [json.loads(Path(p).read_text()) for p in paths]
    beam = reports[0].get("beam_size", 1)
    loads = [r["machine"]["load_average_at_start"][0] for r in reports]
    print(f"{len(reports)} run(s), beam {beam}, {reports[0]['machine']['cpu']}, load average at start {loads}")
    print("| batch | output len | v2 int8 / ct2-int8, wall | v2 int8 / ct2-int8, CPU time | v1 int8 / ct2-int8, CPU time |")
    print("|---|---|---|---|---|")
    v2 = [ratios(r, "ort-int8", "ct2-int8") for r in reports]
    v1 = [ratios(r, "ort-int8-v1", "ct2-int8") for r in reports]
    for key in sorted(v2[0], key=lambda k: (k[1], k[0])):
        wall = statistics.median(x[key][0] for x in v2)
        cpu = statistics.median(x[key][1] for x in v2)
        old = statistics.median(x[key][1] for x in v1 if key in x) if any(key in x for x in v1) else float("nan")
        print(f"| {key[0]} | {key[1]} | {wall:.2f} | **{cpu:.2f}** | {old:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
