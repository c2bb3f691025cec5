"""The benchmark and evaluation scripts, and their raw results (benchmarks/results/).

Each script is a module run from the repository root, `python -m benchmarks.NAME --help`; its docstring gives
the command that produced the figures docs/BENCHMARKS.md quotes, and that page names every one. They measure the
stages from outside or through their public modules: they may import `attnserve.*` and each other; no stage imports
them, they import nothing from `tests/`, and none edits `sys.path` (pyproject.toml's import contracts,
tests/test_benchmarks.py). The package is not installed: it runs from a checkout.

Kinds: the engine (`encoder_profile`, `nbits_step`, and `best_ratios` over `attnserve-bench` reports); HTTP and its
serving tax (`paired_tax`, `stream_wakeups`, `stream_profile`, `soak`, `context_cpu`, `text_interleave_latency`, over
`http_overhead`'s server start-up and lean client); the text front end against espeak-ng (`frontend_vs_espeak`,
`espeak_distance`, `espeak_cpu`, `espeak_overrides`); and the outside scorers of the model (`score_served`,
`score_heteronyms`, `lexicon_check`). `measure` records the machine beside every figure.
"""
