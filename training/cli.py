"""`attnserve-train` and `attnserve-eval`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from training.data import DataError


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _load_yaml(path: Path) -> dict:
    import yaml

    if not path.is_file():
        raise DataError(f"config file not found: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a mapping of config keys")
    return data


def train_main(argv: list[str] | None = None) -> int:
    from training.train import PRESETS, ConfigError, TrainConfig, train

    p = argparse.ArgumentParser(prog="attnserve-train", description="Train an encoder-decoder Transformer.")
    p.add_argument("--config", type=Path, help="YAML file of TrainConfig keys (configs/g2p.yaml)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="start from a preset (tiny trains in seconds)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    p.add_argument("--out", type=Path, required=True, help="run directory to write")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    args = p.parse_args(argv)
    try:
        if args.resume:
            stored = args.out / "config.json"
            if not stored.is_file():
                raise ConfigError(f"--resume: {args.out} has no config.json (is it a run directory?)")
            values = json.loads(stored.read_text())
        else:
            values = asdict(TrainConfig())
            if args.preset:
                values.update(PRESETS[args.preset])
            if args.config:
                values.update(_load_yaml(args.config))
        cfg = TrainConfig.from_dict(values).with_overrides(args.overrides)
        train(cfg, args.out, resume=args.resume)
    except (ConfigError, DataError, ValueError) as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        print("\ninterrupted: continue with --resume", file=sys.stderr)
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
    args = p.parse_args(argv)
    try:
        from training.evaluate import evaluate_path

        report = evaluate_path(args.path, args.split, args.limit or None, args.dataset, args.batch_size)
    except (DataError, FileNotFoundError, ValueError) as e:
        return _fail(str(e))
    out = args.out or args.path / f"eval_{args.split}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"[eval] report written to {out}", file=sys.stderr)
    return 0
