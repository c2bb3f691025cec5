"""`python -m attnserve.loadtest.compare RUN/results.json BASELINE/results.json`: ratios at each common level.

The same table `attnserve-loadtest --baseline` prints at the end of a run, for
two runs already on disk (tokens/s, requests/s, e2e p99 and TTFT p99 of the
first divided by the second's). `--plot FILE.png` draws both runs' TTFT and
e2e percentiles against throughput on shared axes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnserve.loadtest import report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnserve.loadtest.compare", description=__doc__.split("\n\n")[1])
    p.add_argument("run", type=Path, help="results.json of the run to compare")
    p.add_argument("baseline", type=Path, help="results.json of the baseline run")
    p.add_argument("--plot", type=Path, help="write a PNG of both runs' latency percentiles against throughput")
    args = p.parse_args(argv)
    try:
        run, base = (json.loads(path.read_text()) for path in (args.run, args.baseline))
    except (OSError, ValueError) as e:
        p.error(str(e))
    print(report.comparison_text(report.comparison(run["levels"], base), str(args.baseline)))
    if args.plot:
        named = [(run.get("label") or str(args.run), run), (base.get("label") or str(args.baseline), base)]
        message = plot(named, args.plot)
        print(message, file=sys.stderr)
    return 0


def plot(runs: list[tuple[str, dict]], path: Path) -> str:
    """TTFT and e2e p50/p99 against tokens/s, one colour per run, each point labelled with its level."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from attnserve.service.extras import install_command

        return f"plot skipped: matplotlib is not installed (the 'loadtest' extra: {install_command('loadtest')})"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, name in zip(axes, ("ttft_ms", "e2e_ms"), ("TTFT", "e2e")):
        for (label, result), colour in zip(runs, ("tab:blue", "tab:red")):
            levels = [lv for lv in result["levels"] if lv["summary"]["ok"]]
            x = [lv["summary"]["output_tokens_per_s"] for lv in levels]
            for st, style in (("p50", "o-"), ("p99", "^:")):
                ax.plot(x, [lv["summary"][key][st] for lv in levels], style, color=colour, label=f"{label}: {st}")
            for lv, xi in zip(levels, x):
                ax.annotate(lv["label"], (xi, lv["summary"][key]["p99"]), fontsize=7, alpha=0.7)
        ax.set_xlabel("throughput (generated tokens/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_yscale("log")
        ax.set_title(f"{name} p50 and p99 against throughput")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"written: {path}"


if __name__ == "__main__":
    sys.exit(main())
