"""Hugging Face seq2seq checkpoints behind the interface the v1 writer traces (export/graphs/v1.py).

`HFSeq2Seq` holds a loaded transformers model (Marian, BART, mBART) and offers what `Transformer` of
training/model.py offers the writer: `encode`, `cross_kv`, `decode` and a `cfg` with the graph dimensions. The
layers are walked here by hand over the checkpoint's own modules (its projections, norms, activation, embeddings):
attention is written out (project, split heads, scaled scores plus the additive bias, softmax, merge), so the
cache is the explicit `past`/`present` of Contract 2 and no transformers cache class is traced. The same v1
writer, int8 rewrite and engine then apply unchanged.

The families differ in four places, each a switch read from the checkpoint's config:
- positions: Marian's fixed sinusoidal table (sines in the first half, cosines in the second), BART's learned
  table read at position + 2;
- `layernorm_embedding` after the embeddings (BART, mBART);
- LayerNorm after each residual (Marian, BART) or before it with a final LayerNorm per stack (mBART);
- the embedding scale (sqrt(d_model) where `scale_embedding`) and `final_logits_bias` on the logits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from attnserve.training.model import KV, padding_bias


@dataclass(frozen=True)
class PortConfig:
    """The dimensions the writer and the bundle read (the names of training/config.py's ModelConfig)."""

    family: str
    d_model: int
    n_heads: int
    n_encoder_layers: int
    n_decoder_layers: int
    src_vocab_size: int
    tgt_vocab_size: int
    max_source_len: int
    max_target_len: int
    pad_id: int
    bos_id: int  # the decoder start token
    eos_id: int
    unk_id: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


def _attention(attn: nn.Module, q_in: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int) -> Tensor:
    """softmax(Q K^T / sqrt(Dh) + bias) V through the checkpoint's q/out projections; k, v [B, H, L, Dh]."""
    b, t, d = q_in.shape
    q = attn.q_proj(q_in).view(b, t, n_heads, d // n_heads).transpose(1, 2)  # [B, H, T, Dh]
    scores = torch.matmul(q, k.transpose(-1, -2)) * (d // n_heads) ** -0.5 + bias  # [B, H, T, L]
    out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, T, Dh]
    return attn.out_proj(out.transpose(1, 2).reshape(b, t, d))


def _split(x: Tensor, n_heads: int) -> Tensor:
    b, n, d = x.shape
    return x.view(b, n, n_heads, d // n_heads).transpose(1, 2)  # [B, H, N, Dh]


class HFSeq2Seq(nn.Module):
    """A Marian/BART/mBART `...ForConditionalGeneration` as the v1 writer's model (module docstring)."""

    LAST_POSITION_LOGITS = True  # decode projects the last position alone (export/graphs/v1.py reads it)

    def __init__(self, hf_model: nn.Module, cfg: PortConfig):
        super().__init__()
        self.hf = hf_model.eval()
        self.cfg = cfg
        hc = hf_model.config
        self.encoder = hf_model.model.encoder
        self.decoder = hf_model.model.decoder
        self.pre_norm = cfg.family == "mbart" or bool(getattr(hc, "normalize_before", False))  # mBART's are pre-LN always
        self.learned_positions = cfg.family != "marian"
        self.n_heads = cfg.n_heads

    # ---- embeddings -------------------------------------------------------------------
    def _embed(self, stack: nn.Module, ids: Tensor, positions: Tensor) -> Tensor:
        x = stack.embed_tokens(ids)
        if not hasattr(stack.embed_tokens, "embed_scale"):  # BART's embedding scales itself; Marian's stack does
            x = x * getattr(stack, "embed_scale", 1.0)
        offset = 2 if self.learned_positions else 0
        x = x + stack.embed_positions.weight[positions + offset]
        ln = getattr(stack, "layernorm_embedding", None)
        return ln(x) if ln is not None else x

    def _residual(self, norm: nn.Module, x: Tensor, sublayer) -> Tensor:
        if self.pre_norm:
            return x + sublayer(norm(x))
        return norm(x + sublayer(x))

    def _ffn(self, layer: nn.Module, x: Tensor) -> Tensor:
        return layer.fc2(layer.activation_fn(layer.fc1(x)))

    def _final_norm(self, stack: nn.Module, x: Tensor) -> Tensor:
        ln = getattr(stack, "layer_norm", None)  # mBART's pre-norm stacks end with one
        return ln(x) if ln is not None else x

    # ---- the writer's interface (training/model.py's Transformer) ----------------------
    def encode(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """[B, S] ids and mask -> memory [B, S, D] and encoder_attention_bias [B, 1, 1, S]."""
        bias = padding_bias(attention_mask)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :].expand_as(input_ids)
        x = self._embed(self.encoder, input_ids, positions)
        h = self.n_heads
        for layer in self.encoder.layers:
            a = layer.self_attn

            def self_attention(y, a=a):
                return _attention(a, y, _split(a.k_proj(y), h), _split(a.v_proj(y), h), bias, h)

            x = self._residual(layer.self_attn_layer_norm, x, self_attention)
            x = self._residual(layer.final_layer_norm, x, lambda y, layer=layer: self._ffn(layer, y))
        return self._final_norm(self.encoder, x), bias

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Each decoder layer's cross-attention K/V [B, H, S, Dh], projected once per source."""
        h = self.n_heads
        cross = [layer.encoder_attn for layer in self.decoder.layers]
        return [(_split(a.k_proj(memory), h), _split(a.v_proj(memory), h)) for a in cross]

    def decode(
        self,
        input_ids: Tensor,  # [B, T]
        position_ids: Tensor,  # [B, T]
        self_bias: Tensor,  # [B, 1, T, P+T]
        cross_kv: list[KV],
        cross_bias: Tensor,  # [B, 1, 1, S]
        past: list[KV] | None = None,
    ) -> tuple[Tensor, list[KV], list[Tensor]]:
        """-> logits [B, V] (the last position's), present self-attention K/V per layer, and no cross weights (no
        explain graph)."""
        x = self._embed(self.decoder, input_ids, position_ids)
        h = self.n_heads
        presents: list[KV] = []
        for i, layer in enumerate(self.decoder.layers):
            a = layer.self_attn

            def self_attention(y, a=a, i=i):
                k, v = _split(a.k_proj(y), h), _split(a.v_proj(y), h)
                if past is not None:
                    k, v = torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2)  # [B, H, P+T, Dh]
                presents.append((k, v))
                return _attention(a, y, k, v, self_bias, h)

            x = self._residual(layer.self_attn_layer_norm, x, self_attention)

            def cross_attention(y, a=layer.encoder_attn, kv=cross_kv[i]):
                return _attention(a, y, kv[0], kv[1], cross_bias, h)

            x = self._residual(layer.encoder_attn_layer_norm, x, cross_attention)
            x = self._residual(layer.final_layer_norm, x, lambda y, layer=layer: self._ffn(layer, y))
        x = self._final_norm(self.decoder, x[:, -1])  # [B, D]: the step's logits are its last position's alone
        logits = self.hf.lm_head(x)
        if self.hf.final_logits_bias.any():  # zeros in most checkpoints: an [B, V] Add a step for nothing
            logits = logits + self.hf.final_logits_bias
        return logits, presents, []
