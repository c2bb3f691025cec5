"""`attnserve-train` and `attnserve-eval`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from attnserve.service.engine.bundle import write_bundle_json
from attnserve.training.data import DataError


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _load_yaml(path: Path) -> dict:
    import yaml

    if not path.is_file():
        raise DataError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise DataError(f"{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a mapping of config keys")
    return data


def resolve_config(
    preset: str | None = None,
    config: Path | None = None,
    overrides: list[str] = (),
    resume_dir: Path | None = None,
    init_from: Path | None = None,
):
    """The training config: defaults < preset < YAML file < `--set`; a resumed run starts from its config.json.

    With `init_from` (a bundle), the bundle's architecture, tokenizers and task replace those keys;
    a key the YAML file or `--set` gives another value is refused, naming it.
    """
    from attnserve.training.config import PRESETS, ConfigError, TrainConfig

    if resume_dir is not None:
        stored = resume_dir / "config.json"
        if not stored.is_file():
            raise ConfigError(f"--resume: {resume_dir} has no config.json (is it a run directory?)")
        if preset or config:
            print(f"[train] --resume uses {stored}; --preset/--config are ignored (use --set to change keys)")
        values = json.loads(stored.read_text())
    else:
        values = asdict(TrainConfig())
        if preset:
            values.update(PRESETS[preset])
        if config:
            from_file = _load_yaml(config)
            unknown = sorted(set(from_file) - set(values))
            if unknown:
                raise ConfigError(f"{config}: unknown config key(s) {unknown}; valid keys: {', '.join(sorted(values))}")
            values.update(from_file)
    set_values = dict(item.split("=", 1) for item in overrides if "=" in item)
    init_from = init_from or set_values.get("init_from") or values.get("init_from") or None
    if init_from and resume_dir is None:
        from attnserve.training.warmstart import adopt_bundle

        bad = [item for item in overrides if "=" not in item]
        if bad:
            raise ConfigError(f"--set expects key=value, got {bad[0]!r}")
        explicit = set(from_file if config else ()) | set(set_values)
        # --set values are strings here; TrainConfig.from_dict converts them to each key's type
        return TrainConfig.from_dict(adopt_bundle({**values, **set_values}, explicit, init_from))
    return TrainConfig.from_dict(values).with_overrides(list(overrides))


class _HelpConfig(argparse.Action):
    """--help-config: like --help, it answers before the required arguments are checked."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from attnserve.training.config import config_reference

        print(config_reference(), end="")
        parser.exit()


def train_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["context"]:  # the heteronym chooser, not a Transformer: its own recipe (training/context.py)
        from attnserve.training.context import main as context_main

        return context_main(argv[1:])
    from attnserve.training.config import PRESETS, ConfigError

    p = argparse.ArgumentParser(
        prog="attnserve-train",
        description="Train an encoder-decoder Transformer. Every config key with its default: attnserve-train --help-config. "
        "`attnserve-train context --config configs/context.yaml --out RUN` fits the heteronym chooser instead.",
    )
    p.add_argument("--help-config", action=_HelpConfig, help="print every config key with its default (as YAML) and exit")
    p.add_argument("--config", type=Path, help="YAML file of TrainConfig keys (configs/g2p.yaml)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="start from a preset (tiny trains in seconds)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    p.add_argument("--out", type=Path, required=True, help="run directory to write")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument(
        "--allow-drop",
        action="store_true",
        help="train even when more than 5%% of the training pairs exceed max_source_len/max_target_len (drop_too_long=true)",
    )
    p.add_argument(
        "--init-from",
        type=Path,
        metavar="BUNDLE",
        help="start from a model bundle's weights and tokenizers; its architecture and task replace the config's",
    )
    args = p.parse_args(argv)
    try:
        if args.init_from is not None and args.resume:
            raise ConfigError("--init-from starts a new run; --resume continues one (its config.json records the bundle)")
        overrides = args.overrides + (["drop_too_long=true"] if args.allow_drop else [])
        cfg = resolve_config(args.preset, args.config, overrides, args.out if args.resume else None, args.init_from)
        from attnserve.training.train import train  # torch: only once the config is known to be good

        train(cfg, args.out, resume=args.resume)
    except (ConfigError, DataError, ValueError) as e:
        return _fail(str(e))
    except KeyboardInterrupt as e:
        step = getattr(e, "step", None)  # set by train.StopRequested: a clean stop after a save
        if step is None:
            print("\ninterrupted: --resume continues from the last saved checkpoint", file=sys.stderr)
        else:
            print(f"\nstopped at step {step}, checkpoint saved: continue with --resume", file=sys.stderr)
        return 130
    return 0


def eval_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnserve-eval", description="Evaluate a run directory or a model bundle.")
    p.add_argument("path", type=Path, help="run directory (checkpoint.pt) or bundle directory (bundle.json)")
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N examples")
    p.add_argument("--dataset", help="override the dataset recorded in the run")
    p.add_argument("--out", type=Path, help="JSON report path (default: PATH/eval_SPLIT.json)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--num-beams", type=int, default=1, help="bundle only: score beam search of this width (1: greedy)")
    p.add_argument(
        "--variant",
        default="auto",
        help="bundle only: the variant to score (fp32, int8, ...; auto: the one served on this device)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="bundle only: write the headline figures into bundle.json's eval[SPLIT] (what /info and the card cite)",
    )
    args = p.parse_args(argv)
    from attnserve.service.engine.bundle import BundleError  # what evaluating a bundle raises for a bad bundle or variant

    if args.record and not (args.path / "bundle.json").is_file():
        return _fail(f"--record needs a bundle directory; {args.path} has no bundle.json")
    try:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        from attnserve.training.evaluate import evaluate_path

        if args.num_beams < 1:
            raise ValueError(f"--num-beams must be >= 1, got {args.num_beams}")
        if args.variant != "auto" and not (args.path / "bundle.json").is_file():
            raise ValueError(f"--variant names a bundle's variant; {args.path} has no bundle.json")
        report = evaluate_path(
            args.path, args.split, args.limit or None, args.dataset, args.batch_size, args.num_beams, args.variant
        )
    except (DataError, FileNotFoundError, ValueError, BundleError) as e:  # BundleError: a bad bundle or variant
        return _fail(str(e))
    out = args.out or args.path / f"eval_{args.split}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"[eval] report written to {out}", file=sys.stderr)
    if args.record:
        key = args.split if args.num_beams == 1 else f"{args.split}_beam{args.num_beams}"
        _record_eval(args.path / "bundle.json", key, report, args.limit)
    return 0


def _record_eval(bundle_json: Path, split: str, report: dict, limit: int) -> None:
    """bundle.json is not among its own `files`, so recording figures keeps every file's hash valid; its own
    content's hash (`manifest_sha256`) is written anew with it."""

    meta = json.loads(bundle_json.read_text())
    headline = {k: v for k, v in report.items() if isinstance(v, int | float) and k != "decode_seconds"}
    headline["variant"] = report.get("variant")
    if limit:
        headline["limit"] = limit
    meta.setdefault("eval", {})[split] = headline
    write_bundle_json(bundle_json.parent, meta)
    print(f"[eval] {split} figures recorded in {bundle_json}", file=sys.stderr)
