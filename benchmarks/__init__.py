"""The benchmark and evaluation scripts, and their raw results (benchmarks/results/).

Each script is a module run from the repository root, `python -m benchmarks.NAME --help`; its docstring gives
the command that produced the figures docs/BENCHMARKS.md quotes. They measure the stages from outside or
through their public modules: they may import `service`, `export`, `training` and `loadtest`, and each other;
no stage imports them, they import nothing from `tests/`, and none edits `sys.path` (pyproject.toml's
import contracts, tests/test_benchmarks.py). The package is not installed: it runs from a checkout.

Kinds: the engine (`v2_step`, `step_python`, `beam_*`, `raw_step_ab`, `attention_forms`, `int8_*`, `encoder_profile`,
`nbits_step`, `ct2_targets`, `*_ratios`), HTTP and its serving tax (`http_overhead`, `paired_tax`, `tax_parts`,
`latency_ab`, `http_floor`, `stream_*`, `gc_cost`, `soak`, `context_cpu`, `text_interleave_latency`), and
the outside scorers of the model (`score_served`, `score_heteronyms`, `lexicon_check`). `measure` records
the machine beside every figure; `engine_compositions` and `beam_reference` are shared with the tests.
"""
