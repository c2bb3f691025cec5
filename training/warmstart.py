"""Starting a run from a model bundle (`attnserve-train --init-from BUNDLE`) and the data of a
fine-tuning run (`finetune_data`, `replay_pairs`, `dev_data`).

A bundle decides its architecture, vocabularies and task: `adopt_bundle` takes those keys from
bundle.json and refuses a key the user set to something else, naming it. The weights come from
the bundle's own fp32 graphs (training/weights.py reads them: numpy and onnx only, no copy of the
weights is shipped twice), the tokenizers from its tokenizer files.

The user's pairs must be expressible in the bundle's vocabularies: a target symbol or a source
character the bundle's tokenizers do not know (after the bundle's own normalisation, NFKC and,
for G2P, lower-casing) is refused, naming the symbol and FILE:LINE. Nothing is mapped to
`<unk>` silently: a model cannot learn to say a symbol it has no output for.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.training.config import Architecture, ConfigError
from attnserve.training.data import DataError, Example, load_dictionary, load_examples, load_numbered_pairs
from attnserve.training.tokenize import UNK_ID

# Architecture keys a bundle fixes (dropout is a training choice, not the network's shape).
ARCHITECTURE_KEYS = tuple(k for k in Architecture.__dataclass_fields__ if k != "dropout")


def bundle_meta(bundle_dir: str | Path) -> dict:
    path = Path(bundle_dir) / "bundle.json"
    if not path.is_file():
        raise ConfigError(f"--init-from: {bundle_dir} has no bundle.json (is it a model bundle?)")
    return json.loads(path.read_text())


def bundle_tokenizers(bundle_dir: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers of the bundle, as bundle.json `tokenizers` names them."""
    names = bundle_meta(bundle_dir).get("tokenizers", {"source": "src_tokenizer.json", "target": "tgt_tokenizer.json"})
    out = []
    for role in ("source", "target"):
        path = Path(bundle_dir) / names[role]
        if not path.is_file():
            raise ConfigError(f"--init-from: the bundle's {role} tokenizer {path} is missing")
        out.append(Tokenizer.from_file(str(path)))
    return out[0], out[1]


def tokenizer_settings(tok: Tokenizer) -> tuple[str, bool]:
    """(kind as training/tokenize.py names it, whether it lower-cases) of a tokenizer the project built."""
    spec = json.loads(tok.to_str())
    model = (spec.get("model") or {}).get("type")
    pre = (spec.get("pre_tokenizer") or {}).get("type")
    kind = "bpe" if model == "BPE" else "char" if pre == "Split" else "whitespace"
    return kind, "Lowercase" in json.dumps(spec.get("normalizer"))


def bundle_settings(bundle_dir: str | Path) -> dict:
    """The training config keys the bundle decides, with the bundle's values."""
    meta = bundle_meta(bundle_dir)
    settings = {k: meta["config"][k] for k in ARCHITECTURE_KEYS}
    src, tgt = bundle_tokenizers(bundle_dir)
    settings["src_tokenizer"], settings["lowercase_source"] = tokenizer_settings(src)
    settings["tgt_tokenizer"], _ = tokenizer_settings(tgt)
    settings["task"] = meta.get("task", "g2p")
    settings["strip_stress"] = bool(meta.get("strip_stress", False))
    return settings


def adopt_bundle(values: dict, explicit: set[str], bundle_dir: str | Path) -> dict:
    """`values` (TrainConfig keys) with the bundle's architecture, tokenizers and task; a key in `explicit`
    (set by the user in a YAML file or with --set) that disagrees with the bundle is a ConfigError naming it.
    `dropout` and `dataset` are the bundle's unless the user set them (they may differ)."""
    settings = bundle_settings(bundle_dir)
    conflicts = [
        f"{key}={_normalised(values[key], settings[key])!r} (the bundle has {settings[key]!r})"
        for key in settings
        if key in explicit and _normalised(values[key], settings[key]) != settings[key]
    ]
    if conflicts:
        raise ConfigError(
            f"--init-from {bundle_dir}: the bundle fixes these keys, and the config sets them otherwise: "
            + "; ".join(conflicts)
            + ". Remove them (the architecture, tokenizers and task come from the bundle)."
        )
    out = {**values, **settings, "init_from": str(bundle_dir)}
    meta = bundle_meta(bundle_dir)
    if "dropout" not in explicit:  # a training choice the user may change; by default the bundle's
        out["dropout"] = meta["config"]["dropout"]
    if "dataset" not in explicit and meta.get("dataset"):
        out["dataset"] = meta["dataset"]
    return out


def _normalised(value, like):
    """A --set value is a string until TrainConfig converts it: compare it as the bundle's type."""
    if isinstance(value, str) and not isinstance(like, str):
        from attnserve.training.config import _coerce

        try:
            return _coerce("", value, like)
        except ConfigError:
            return value
    return value


def bundle_state_dict(bundle_dir: str | Path) -> tuple[dict, dict]:
    """(model config, state_dict of torch tensors) read from the bundle's fp32 graphs."""
    import torch

    from attnserve.training.weights import WeightsError, load_bundle_weights

    try:
        config, state = load_bundle_weights(bundle_dir)
    except WeightsError as e:
        raise ConfigError(f"--init-from: {e}") from None
    return config, {k: torch.from_numpy(v) for k, v in state.items()}


# ---- fine-tuning data --------------------------------------------------------------------
def unknown_symbols(tok: Tokenizer, text: str) -> list[str]:
    """The pieces of `text` the tokenizer maps to `<unk>`, as written in `text`."""
    enc = tok.encode(text, add_special_tokens=False)
    return list(dict.fromkeys(text[a:b] for i, (a, b) in zip(enc.ids, enc.offsets) if i == UNK_ID))


def finetune_examples(path: str | Path, src_tok: Tokenizer, tgt_tok: Tokenizer, strip_stress_marks: bool) -> list[Example]:
    """Every pair of the user's file as a training example (no hash split), each checked against the
    bundle's vocabularies; an unknown source character or target symbol is a DataError naming FILE:LINE."""
    from attnserve.training.data import strip_stress

    path = Path(path)
    examples: dict[str, Example] = {}
    for lineno, src, tgt in load_numbered_pairs(path):
        if strip_stress_marks:
            tgt = strip_stress(tgt)
        for side, tok, text in (("source", src_tok, src), ("target", tgt_tok, tgt)):
            unknown = unknown_symbols(tok, text)
            if unknown:
                kind = "character" if side == "source" else "symbol"
                listed = ", ".join(repr(u) for u in unknown)
                raise DataError(
                    f"{path}:{lineno}: {side} {kind}(s) {listed} not in the bundle's {side} vocabulary, "
                    f"which the model cannot learn to {'read' if side == 'source' else 'say'}; {_known(tok)}"
                )
        example = examples.setdefault(src, Example(src, []))
        if tgt not in example.targets:
            example.targets.append(tgt)
    return list(examples.values())


def _known(tok: Tokenizer, at_most: int = 100) -> str:
    """The vocabulary, spelled out when it is small (characters, phonemes), for an error message."""
    vocab = sorted(t for t in tok.get_vocab() if not (t.startswith("<") and t.endswith(">")))
    if len(vocab) > at_most:
        return f"it has {len(vocab)} entries"
    return "it has: " + " ".join(vocab)


def training_examples(cfg, src_tok: Tokenizer | None, tgt_tok: Tokenizer | None) -> list[Example]:
    """The run's training examples: `dataset`'s train split; with `finetune_data`, every user pair
    (`finetune_repeat` times) plus `replay_pairs` of `dataset`'s train split drawn with the run's seed."""
    limit = cfg.train_limit or None
    if not cfg.finetune_data:
        return load_examples(cfg.dataset, "train", cfg.strip_stress, limit)
    if src_tok is None or tgt_tok is None:
        raise ConfigError("finetune_data needs init_from: the user's pairs are checked against the bundle's vocabularies")
    user = finetune_examples(cfg.finetune_data, src_tok, tgt_tok, cfg.strip_stress)
    replay: list[Example] = []
    if cfg.replay_pairs:
        pool = load_examples(cfg.dataset, "train", cfg.strip_stress, limit)
        taught = {e.source for e in user}
        pool = [e for e in pool if e.source not in taught]  # the user's answer wins over the dictionary's
        replay = random.Random(cfg.seed).sample(pool, min(cfg.replay_pairs, len(pool)))
    return replay + user * cfg.finetune_repeat


def dev_examples(cfg) -> list[Example]:
    """`dev_data`'s pairs (all of them), or `dataset`'s dev split; at most `eval_limit`."""
    if cfg.dev_data:
        grouped = load_dictionary(cfg.dev_data, cfg.strip_stress)
        examples = [Example(src, refs) for src, refs in grouped.items()]
    else:
        examples = load_examples(cfg.dataset, "dev", cfg.strip_stress)
    return examples[: cfg.eval_limit] if cfg.eval_limit else examples
