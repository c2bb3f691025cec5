"""The training pairs a run trains on: encoded, its length limits sized from them where the config leaves them at 0,
and those too long counted, warned of, and refused past MAX_DROPPED_SHARE unless `drop_too_long` (--allow-drop)."""

from __future__ import annotations

from dataclasses import replace

from tokenizers import Tokenizer

from attnserve.training.config import ConfigError, TrainConfig
from attnserve.training.data import Example
from attnserve.training.tokenize import UNK_ID, encode

# The longest sequence a length sized from the data may reach (tokens): beyond it a pair is dropped, with the
# drop rule below. Sinusoidal positions have no table to outgrow; the bound keeps a stray long line (a file's
# paragraph in a list of phrases) from sizing every batch's padding and the in-place cache.
LENGTH_BUDGET = 512
# A run that would drop more than this share of its training pairs stops unless drop_too_long is set.
MAX_DROPPED_SHARE = 0.05


def fit_lengths(cfg: TrainConfig, sources: list[int], targets: list[int]) -> TrainConfig:
    """`cfg` with each length left at 0 sized from the data: the longest training pair's (source tokens; target
    tokens plus the end token) plus a margin of a tenth (at least 2), within LENGTH_BUDGET. Given lengths stay.

    The margin lets held-out inputs a little longer than any training source through the server's bound."""

    def sized(given: int, longest: int) -> int:
        return given or min(LENGTH_BUDGET, longest + max(2, -(-longest // 10)))

    return replace(
        cfg,
        max_source_len=sized(cfg.max_source_len, max(sources, default=1)),
        max_target_len=sized(cfg.max_target_len, max(targets, default=0) + 1),
    )


def encode_pairs(
    cfg: TrainConfig, train_ex: list[Example], src_tok: Tokenizer, tgt_tok: Tokenizer
) -> tuple[TrainConfig, list[tuple[list[int], list[int]]], int, int]:
    """The config with its lengths sized from the data where left at 0 (fit_lengths); (source ids, target ids) of
    every pair that fits them; the number too long; the number with a target symbol the --init-from bundle's
    vocabulary lacks (both skipped). A run that would drop more than MAX_DROPPED_SHARE of its pairs as too long
    is refused unless `drop_too_long` is set: the model would never see them, and the server would refuse them."""
    encoded: list[tuple[list[int], list[int]]] = []
    unknown = 0
    for e in train_ex:
        s = encode(src_tok, e.source)
        for t in e.targets:
            tid = encode(tgt_tok, t)
            if cfg.init_from and UNK_ID in tid:  # a symbol the bundle's vocabulary lacks (its training data had none)
                unknown += 1
            else:
                encoded.append((s, tid))
    cfg = fit_lengths(cfg, [len(s) for s, _ in encoded], [len(t) for _, t in encoded])
    pairs = [(s, t) for s, t in encoded if 0 < len(s) <= cfg.max_source_len and len(t) < cfg.max_target_len]
    skipped = len(encoded) - len(pairs)
    if not pairs:
        raise ConfigError("no training pair fits max_source_len/max_target_len")
    if skipped > MAX_DROPPED_SHARE * len(encoded) and not cfg.drop_too_long:
        raise ConfigError(
            f"{skipped} of {len(encoded)} training pairs ({100 * skipped / len(encoded):.1f}%) do not fit "
            f"max_source_len={cfg.max_source_len} / max_target_len={cfg.max_target_len} (or have an empty source): "
            "raise the limits (0 sizes them from the data), or pass --allow-drop to train without them"
        )
    return cfg, pairs, skipped, unknown


def dropped_pairs_warning(cfg: TrainConfig, kept: int, skipped: int) -> str | None:
    """The warning for training pairs left out as too long, naming the limits; None when none were."""
    if not skipped:
        return None
    return (
        f"WARNING: {skipped} of {kept + skipped} training pairs left out: longer than max_source_len="
        f"{cfg.max_source_len} source tokens or max_target_len={cfg.max_target_len} target tokens (or an empty source). "
        "The served model refuses inputs longer than max_source_len."
    )
