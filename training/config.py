"""Model dimensions: one frozen dataclass every module takes.

`ModelConfig` is stored as a plain dict inside `checkpoint.pt` and `bundle.json`
(Contract 1 and 2), so every field is an int, float, bool or string.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class ModelConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    max_source_len: int = 64
    max_target_len: int = 64
    dropout: float = 0.1
    norm_placement: str = "pre"  # "pre" (default, stabler) or "post" (the 2017 paper's)
    pos_encoding: str = "sinusoidal"  # "sinusoidal" or "learned"
    activation: str = "relu"  # "relu" or "gelu"
    tie_embeddings: bool = True  # decoder input embedding == output projection
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be 'pre' or 'post', not {self.norm_placement!r}")
        if self.pos_encoding not in ("sinusoidal", "learned"):
            raise ValueError(f"pos_encoding must be 'sinusoidal' or 'learned', not {self.pos_encoding!r}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', not {self.activation!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config keys {unknown}; valid keys: {sorted(known)}")
        return cls(**d)
