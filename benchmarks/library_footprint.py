"""The library's footprint against piper-phonemize's espeak-ng: installed size, start-up, memory, and per-sentence cost.

    make wheels && python -m benchmarks.library_footprint --wheel dist/attnserve-0.1.0-py3-none-any.whl

1. Size: a fresh venv, `pip install WHEEL` (the core, from the package index), measured with `du` less the bare venv's
   own size; each distribution's share is the sum of the file sizes its RECORD lists.
2. Start-up: a new process that imports and phonemizes one sentence, `attnserve.phonemize("Hello world.")` in that
   venv, against `piper_phonemize.phonemize_espeak("Hello world.", "en-us")` in this interpreter's environment, taken
   A B A B `--starts` times each; wall time and the child's peak RSS (ru_maxrss from wait4).
3. Per sentence, in process: `--sentences` sentences of benchmarks/data/news_2000.txt, each phonemized alone by one
   `Phonemizer` (threads 1) and by `phonemize_espeak`, alternated A B A B over `--rounds` rounds; each one's best
   round, and the ratio.
The raw JSON (every figure, the machine) goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.measure import machine, write_report

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "benchmarks" / "data" / "news_2000.txt"
RESULTS = ROOT / "benchmarks" / "results"
ATTNSERVE_START = "import attnserve; attnserve.phonemize('Hello world.')"
ESPEAK_START = "from piper_phonemize import phonemize_espeak; phonemize_espeak('Hello world.', 'en-us')"


def clean_env() -> dict[str, str]:
    """This environment without PYTHON* (a PYTHONPATH would put a checkout before the venv's install) or ATTNSERVE_*."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ATTNSERVE_"))}


def du_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def record_sizes(python: Path) -> dict[str, int]:
    """Each installed distribution's bytes, from its RECORD, in the environment of `python`."""
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.metadata['Name']: sum(f.size or 0 for f in d.files or []) for d in m.distributions()}))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, env=clean_env())
    return json.loads(done.stdout)


def core_venv(wheel: Path, where: Path) -> tuple[Path, dict]:
    """A fresh venv with the core installed; its python and the size figures."""
    venv = where / "core"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    bare = du_bytes(venv)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)]
    subprocess.run(pip, check=True, env=clean_env())
    sizes = record_sizes(venv / "bin" / "python")
    sizes.pop("pip", None)
    total = du_bytes(venv) - bare
    return venv / "bin" / "python", {
        "installed_mb": round(total / 1e6, 1),
        "by_distribution_mb": {k: round(v / 1e6, 1) for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])},
    }


def start(python: Path, code: str, cwd: Path) -> tuple[float, float]:
    """One new process running `code`: its wall seconds and peak RSS in MB."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(python), "-c", code], cwd=cwd, env=clean_env())
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{python} -c {code!r} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024


def startups(core_python: Path, starts: int, cwd: Path) -> dict:
    runs: dict[str, list] = {"attnserve": [], "espeak": []}
    for _ in range(starts):  # A B A B: a busy machine slows both alike
        runs["attnserve"].append(start(core_python, ATTNSERVE_START, cwd))
        runs["espeak"].append(start(Path(sys.executable), ESPEAK_START, cwd))
    out = {}
    for name, rows in runs.items():
        walls, rss = sorted(w for w, _ in rows), sorted(r for _, r in rows)
        out[name] = {
            "wall_s_best": round(walls[0], 3),
            "wall_s_median": round(walls[len(walls) // 2], 3),
            "max_rss_mb_median": round(rss[len(rss) // 2], 1),
            "runs": [[round(w, 3), round(r, 1)] for w, r in rows],
        }
    return out


def per_sentence(n: int, rounds: int) -> dict:
    """`n` sentences, each phonemized alone in process, by attnserve and by espeak-ng, alternated."""
    from piper_phonemize import phonemize_espeak

    from attnserve.service.phonemizer import Phonemizer
    from attnserve.service.text.sentences import sentence_spans

    text = TEXT.read_text(encoding="utf-8")
    sentences = [text[a:b] for a, b in sentence_spans(text)[0]][:n]
    times: dict[str, list[float]] = {"attnserve": [], "espeak": []}
    with Phonemizer(threads=1) as p:
        for s in sentences:  # warm-up: the lexicon's memo, the model's sessions
            p.phonemize(s)
            phonemize_espeak(s, "en-us")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for s in sentences:
                p.phonemize(s)
            times["attnserve"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for s in sentences:
                phonemize_espeak(s, "en-us")
            times["espeak"].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    return {
        "sentences": len(sentences),
        "best_s": {k: round(v, 4) for k, v in best.items()},
        "ms_per_sentence_best": {k: round(1000 * v / len(sentences), 3) for k, v in best.items()},
        "ratio_attnserve_over_espeak": round(best["attnserve"] / best["espeak"], 2),
        "rounds_s": {k: [round(x, 4) for x in v] for k, v in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path, required=True, help="the core wheel (make wheels writes it to dist/)")
    ap.add_argument("--starts", type=int, default=10, help="new processes of each, alternated")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        core_python, size = core_venv(args.wheel.resolve(), Path(tmp))
        result = {"machine": machine(), "size": size, "startup": startups(core_python, args.starts, Path(tmp))}
    result["per_sentence"] = per_sentence(args.sentences, args.rounds)
    path = write_report(args.out, "library_footprint", result)
    summary = {k: v for k, v in result.items() if k != "machine"}
    for name in ("attnserve", "espeak"):
        summary["startup"][name].pop("runs")
    summary["per_sentence"].pop("rounds_s")
    print(summary)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
