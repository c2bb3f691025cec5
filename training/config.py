"""Configuration: the model's dimensions and the training recipe (no torch here,
so the command line can reject a bad config before importing it).

`Architecture` declares the model's shape once. `ModelConfig` (architecture + vocabulary
sizes + special ids) is stored as a plain dict inside `checkpoint.pt` and `bundle.json`
(Contract 1 and 2), so every field is an int, float, bool or string.
`TrainConfig` (architecture + data + optimisation keys, one flat namespace) is a run's
`config.json`: defaults < `--preset` < YAML < `--set`.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields, replace

from attnserve.training.tokenize import AUTO, BOS_ID, EOS_ID, KINDS, PAD_ID, UNK_ID


@dataclass(frozen=True)
class Architecture:
    """The network's shape and regularisation: what a training recipe chooses.

    Declared once: `ModelConfig` adds the vocabulary sizes and special ids to it, and
    `TrainConfig` inherits it, so each field is a training config key of the same name.
    """

    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    max_source_len: int = 0  # source tokens; 0: sized from the training data (training/train.py, fit_lengths)
    max_target_len: int = 0  # target tokens, the end token included; 0: sized from the training data
    dropout: float = 0.1
    norm_placement: str = "pre"  # "pre" (default, stabler) or "post" (the 2017 paper's)
    pos_encoding: str = "sinusoidal"  # "sinusoidal" or "learned"
    activation: str = "relu"  # "relu" or "gelu"
    tie_embeddings: bool = True  # decoder input embedding == output projection

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be 'pre' or 'post', not {self.norm_placement!r}")
        if self.pos_encoding not in ("sinusoidal", "learned"):
            raise ValueError(f"pos_encoding must be 'sinusoidal' or 'learned', not {self.pos_encoding!r}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', not {self.activation!r}")

    def architecture(self) -> dict:
        """The `Architecture` fields of this config (of a TrainConfig too), by name."""
        return {f.name: getattr(self, f.name) for f in fields(Architecture)}


@dataclass(frozen=True, kw_only=True)
class ModelConfig(Architecture):
    """Everything `Transformer` needs: the architecture, the vocabularies and the special ids."""

    src_vocab_size: int
    tgt_vocab_size: int
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("max_source_len", "max_target_len"):
            if getattr(self, key) <= 0:  # a training config's 0 ("from the data") is resolved before a model is built
                raise ValueError(f"{key} must be positive in a model config; got {getattr(self, key)}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        # vocabulary sizes first, as checkpoints and bundle.json have always listed them
        return {"src_vocab_size": self.src_vocab_size, "tgt_vocab_size": self.tgt_vocab_size} | asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config keys {unknown}; valid keys: {sorted(known)}")
        return cls(**d)


class ConfigError(ValueError):
    """A configuration problem the user must fix."""


_CHOICES = {
    "task": ("auto", "g2p", "seq2seq"),
    "schedule": ("inverse_sqrt", "cosine"),
    "precision": ("auto", "fp32", "bf16"),
    "src_tokenizer": KINDS,
    "tgt_tokenizer": KINDS,
}
_POSITIVE = ("finetune_repeat", "max_tokens", "log_every", "eval_every", "checkpoint_every", "eval_batch_size")
_NON_NEGATIVE = (
    *("average_last", "warmup_steps", "train_limit", "eval_limit", "replay_pairs"),
    *("threads", "max_minutes", "grad_clip", "weight_decay", "max_source_len", "max_target_len"),
)
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _coerce(key: str, value, default):
    """A YAML or --set value converted to the type of the field's default, or a ConfigError.

    YAML reads `1e-3` as a string (it wants `1.0e-3`), so numeric strings are accepted.
    """
    if key == "bpe_vocab_size":
        return _vocab_size(value)
    kind = type(default)
    try:
        if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
            return value
        if kind is bool and isinstance(value, str) and value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
        if kind is int and not isinstance(value, bool):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                return int(value)
        if kind is float and not isinstance(value, bool) and isinstance(value, int | str):
            return float(value)
    except ValueError:
        pass
    raise ConfigError(f"config key {key!r}: {value!r} is not a valid {kind.__name__}")


def _vocab_size(value) -> int | str:
    """bpe_vocab_size: "auto", or a positive whole number (kept as the user set it)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        size = int(value) if not isinstance(value, bool) and float(value) == int(float(value)) else 0
    except (TypeError, ValueError, OverflowError):
        size = 0
    if size <= 0:
        raise ConfigError(f"bpe_vocab_size must be 'auto' or a positive whole number; got {value!r}")
    return size


@dataclass(frozen=True)
class TrainConfig(Architecture):
    """A run's recipe. The model keys (d_model, n_heads, ...) are `Architecture`'s fields."""

    # data
    dataset: str = "cmudict"  # "cmudict", "numbers" (generated: training/examples.py) or a TSV/JSONL file of pairs
    # "g2p" (WER/PER: words in, phonemes out, read word by word) or "seq2seq" (exact match, token accuracy, chrF);
    # "auto": g2p for CMUdict and .dict files, seq2seq for generated and TSV/JSONL pairs (resolved_task)
    task: str = "auto"
    strip_stress: bool = False
    src_tokenizer: str = "char"  # "char", "whitespace" (whole words seen in training) or "bpe"
    tgt_tokenizer: str = "whitespace"  # G2P's phonemes; targets of single words need "char" (or "bpe")
    lowercase_source: bool = True
    bpe_vocab_size: int | str = "auto"  # bpe: "auto" (largest size keeping the mean text >= 4 tokens, at most 8000) or a number
    train_limit: int = 0  # 0 = all; a small number for smoke tests
    drop_too_long: bool = False  # train even when more than 5% of the training pairs exceed the length limits
    # starting from a bundle, and fine-tuning a user's pairs (training/warmstart.py)
    init_from: str = ""  # a model bundle: its weights, tokenizers and architecture start the run
    finetune_data: str = ""  # TSV/JSONL pairs that ALL train (no hash split); dev/test stay `dataset`'s
    finetune_repeat: int = 1  # each finetune_data pair appears this many times per epoch
    replay_pairs: int = 0  # with finetune_data: this many of `dataset`'s training pairs mixed in (against forgetting)
    dev_data: str = ""  # a TSV/JSONL file whose pairs are all the dev set (default: `dataset`'s dev split)
    # optimization
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 1000
    schedule: str = "inverse_sqrt"  # or "cosine"
    max_steps: int = 20000
    max_minutes: float = 0.0  # 0 = no wall-clock limit
    max_tokens: int = 4096  # padded target tokens per batch (per rank)
    label_smoothing: float = 0.1
    grad_clip: float = 1.0
    precision: str = "auto"  # "auto" (bf16 autocast on CUDA or a CPU with bf16 instructions), "fp32", "bf16"
    seed: int = 1234
    # bookkeeping
    eval_every: int = 1000
    eval_limit: int = 2000  # dev examples per periodic eval; 0 = the whole split
    eval_batch_size: int = 256
    log_every: int = 50
    checkpoint_every: int = 1000
    average_last: int = 0  # 0 = off; else average the weights of the last N checkpoints at the end
    threads: int = 0  # torch intra-op threads; 0 = leave torch's default

    def __post_init__(self) -> None:
        for key, allowed in _CHOICES.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {getattr(self, key)!r}")
        for key in _POSITIVE:
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive; got {getattr(self, key)!r}")
        _vocab_size(self.bpe_vocab_size)
        for key in _NON_NEGATIVE:
            if getattr(self, key) < 0:
                raise ConfigError(f"{key} must be >= 0; got {getattr(self, key)!r}")
        if self.max_steps < 0 or (self.max_steps == 0 and not self.init_from):
            raise ConfigError(f"max_steps must be positive (0 only with init_from: a bundle as a run); got {self.max_steps}")
        for key in ("dropout", "label_smoothing"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"{key} must be in [0, 1); got {getattr(self, key)!r}")
        try:  # the model's own checks (d_model divisible by n_heads, ...) before any data is read
            super().__post_init__()
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def resolved_task(self) -> "TrainConfig":
        """This config with task "auto" made concrete from the dataset: a pronouncing dictionary (cmudict, a .dict
        file) is G2P; anything else is pairs of text, which G2P's word splitting and stress stripping would spoil."""
        if self.task != "auto":
            return self
        g2p = self.dataset == "cmudict" or self.dataset.endswith(".dict")
        return replace(self, task="g2p" if g2p else "seq2seq")

    def model_config(self, src_vocab: int, tgt_vocab: int) -> ModelConfig:
        return ModelConfig(
            **self.architecture(),
            src_vocab_size=src_vocab,
            tgt_vocab_size=tgt_vocab,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
        )

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """Keys of a YAML file or config.json; values converted to each field's type."""
        defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
        unknown = sorted(set(d) - set(defaults))
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; valid keys: {', '.join(sorted(defaults))}")
        return cls(**{k: _coerce(k, v, defaults[k]) for k, v in d.items()})

    def with_overrides(self, assignments: list[str]) -> "TrainConfig":
        """Apply `key=value` strings, converting value to the field's type."""
        values = asdict(self)
        for item in assignments:
            if "=" not in item:
                raise ConfigError(f"--set expects key=value, got {item!r}")
            key, raw = item.split("=", 1)
            if key not in values:
                raise ConfigError(f"unknown config key {key!r}; valid keys: {', '.join(sorted(values))}")
            values[key] = _coerce(key, raw, values[key])
        return TrainConfig(**values)


PRESETS: dict[str, dict] = {
    # Trains in seconds on a laptop CPU: tests and smoke runs.
    "tiny": dict(
        d_model=64,
        n_heads=4,
        d_ff=128,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        lr=3e-3,
        warmup_steps=100,
        schedule="cosine",  # a short fixed budget: anneal to zero by max_steps
        max_steps=400,
        max_tokens=1024,
        eval_every=200,
        checkpoint_every=200,
        log_every=20,
        eval_limit=200,
        label_smoothing=0.0,
    ),
    # The CMUSphinx g2p-seq2seq Transformer's size: 3+3 layers, 256 wide.
    "base": dict(
        d_model=256,
        n_heads=4,
        d_ff=1024,
        n_encoder_layers=3,
        n_decoder_layers=3,
        dropout=0.1,
        lr=1e-3,
        warmup_steps=1000,
        max_steps=20000,
        max_tokens=4096,
    ),
}


def config_reference() -> str:
    """Every training key with its default and the comment beside it in this file, as YAML (`attnserve-train
    --help-config`): a file to start a config from, and the reference docs/TRAINING.md points to."""
    import inspect
    import json
    import re

    comments: dict[str, str] = {}
    sections: dict[str, str] = {}  # first key of a section -> its heading comment
    pending = "the model (Architecture)"
    for cls in (Architecture, TrainConfig):
        for line in inspect.getsource(cls).splitlines():
            if m := re.match(r"^    # (.+)$", line):
                pending = m.group(1)
            elif m := re.match(r"^    (\w+): [^=]+=[^#]+?(?:\s+#\s*(.*))?$", line):
                comments[m.group(1)] = m.group(2) or ""
                if pending:
                    sections[m.group(1)], pending = pending, ""
    out = [
        "# attnserve-train keys and their defaults: defaults < --preset < --config FILE.yaml < --set KEY=VALUE",
        *(f"# --preset {name}: {', '.join(f'{k}={v}' for k, v in keys.items())}" for name, keys in PRESETS.items()),
    ]
    for f in fields(TrainConfig):
        if f.name in sections:
            out += ["", f"# {sections[f.name]}"]
        value = (
            json.dumps(f.default)
            if isinstance(f.default, str)
            else str(f.default).lower()
            if isinstance(f.default, bool)
            else f.default
        )
        note = f"  # {comments[f.name]}" if comments.get(f.name) else ""
        out.append(f"{f.name}: {value}{note}")
    return "\n".join(out) + "\n"
