"""An encoder-decoder Transformer written from the attention equations up.

Shapes: B batch, S source length, T target (new) positions, P past positions,
H heads, Dh head dim, D model width, V vocabulary.

Attention over a set is `h = V a`, `a = softmax(K^T q / sqrt(Dh))`. Masks are
*additive* biases (0 where a key may be seen, NEG_INF where not), built once
per forward and shared by every layer. NEG_INF is a large finite number, not
-inf, so a fully masked row can never produce NaN and fp16 export stays sane.

The KV cache is explicit: self-attention takes `past` (k, v) and returns
`present`; cross-attention takes `cross_kv`, projected once per source by
`Transformer.cross_kv` (the export puts that in the encoder graph).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnserve.training.config import ModelConfig

NEG_INF = -1e9

KV = tuple[Tensor, Tensor]  # ([B, H, L, Dh], [B, H, L, Dh])


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).  # [max_len, D]"""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, two_i / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


def padding_bias(mask: Tensor) -> Tensor:
    """[B, L] int mask (1 real, 0 pad) -> [B, 1, 1, L] additive bias."""
    return ((1.0 - mask.to(torch.float32)) * NEG_INF)[:, None, None, :]


def decoder_self_bias(decoder_attention_mask: Tensor, new_len: int) -> Tensor:
    """Causal + padding bias for the last `new_len` positions of a [B, P+T] mask.

    Query t (absolute slot P+t) may see key slot j iff j <= P+t and mask[j] == 1.
    Rows of one batch may have different real past lengths: their padding slots
    are 0 in the mask, so they share one step.  # -> [B, 1, T, P+T]
    """
    total = decoder_attention_mask.shape[1]
    key_idx = torch.arange(total, device=decoder_attention_mask.device)  # [P+T]
    query_idx = key_idx[total - new_len :] if new_len else key_idx[:0]  # [T]
    causal = (key_idx[None, :] <= query_idx[:, None]).to(torch.float32)  # [T, P+T]
    causal_bias = (1.0 - causal) * NEG_INF
    return padding_bias(decoder_attention_mask) + causal_bias[None, None, :, :]


class MultiHeadAttention(nn.Module):
    """One module for self-, masked self- and cross-attention."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape  # [B, N, D]
        return x.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)  # [B, H, N, Dh]

    def project_kv(self, source: Tensor) -> KV:
        """[B, S, D] -> keys and values [B, H, S, Dh]; cross-attention calls it once per source."""
        return self.split_heads(self.k_proj(source)), self.split_heads(self.v_proj(source))

    def forward(
        self,
        x: Tensor,  # [B, T, D] queries come from here
        attn_bias: Tensor,  # broadcastable to [B, H, T, L]
        past: KV | None = None,  # self-attention cache, [B, H, P, Dh] each
        static_kv: KV | None = None,  # precomputed cross-attention K/V, [B, H, S, Dh] each
    ) -> tuple[Tensor, KV, Tensor]:
        q = self.split_heads(self.q_proj(x))  # [B, H, T, Dh]
        if static_kv is not None:
            k, v = static_kv
        else:
            k, v = self.project_kv(x)  # [B, H, T, Dh]
            if past is not None:
                k = torch.cat([past[0], k], dim=2)  # [B, H, P+T, Dh]
                v = torch.cat([past[1], v], dim=2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale + attn_bias  # [B, H, T, L]
        weights = torch.softmax(scores, dim=-1)  # rows sum to 1 over keys
        out = torch.matmul(self.dropout(weights), v)  # [B, H, T, Dh]
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # [B, T, D]
        return self.out_proj(out), (k, v), weights


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, activation: str, dropout: float):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.act(self.up(x))))


class Residual(nn.Module):
    """x + sublayer(x) with LayerNorm before (pre-norm) or after (post-norm)."""

    def __init__(self, d_model: int, placement: str, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.pre = placement == "pre"
        self.dropout = nn.Dropout(dropout)

    def normed_input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre else x

    def add(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        y = x + self.dropout(sublayer_out)
        return y if self.pre else self.norm(y)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout)
        self.attn_res = Residual(cfg.d_model, cfg.norm_placement, cfg.dropout)
        self.ffn_res = Residual(cfg.d_model, cfg.norm_placement, cfg.dropout)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        h, _, _ = self.self_attn(self.attn_res.normed_input(x), bias)
        x = self.attn_res.add(x, h)
        return self.ffn_res.add(x, self.ffn(self.ffn_res.normed_input(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout)
        self.self_res = Residual(cfg.d_model, cfg.norm_placement, cfg.dropout)
        self.cross_res = Residual(cfg.d_model, cfg.norm_placement, cfg.dropout)
        self.ffn_res = Residual(cfg.d_model, cfg.norm_placement, cfg.dropout)

    def forward(
        self,
        x: Tensor,  # [B, T, D]
        self_bias: Tensor,  # [B, 1, T, P+T]
        cross_kv: KV,  # [B, H, S, Dh] each
        cross_bias: Tensor,  # [B, 1, 1, S]
        past: KV | None = None,
    ) -> tuple[Tensor, KV, Tensor]:
        h, present, _ = self.self_attn(self.self_res.normed_input(x), self_bias, past=past)
        x = self.self_res.add(x, h)
        h, _, cross_weights = self.cross_attn(self.cross_res.normed_input(x), cross_bias, static_kv=cross_kv)
        x = self.cross_res.add(x, h)
        x = self.ffn_res.add(x, self.ffn(self.ffn_res.normed_input(x)))
        return x, present, cross_weights  # cross_weights [B, H, T, S]


class Embedding(nn.Module):
    """Token embedding * sqrt(D) + position encoding looked up by explicit position ids."""

    def __init__(self, vocab_size: int, cfg: ModelConfig, max_len: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        nn.init.normal_(self.tokens.weight, std=cfg.d_model**-0.5)
        self.scale = math.sqrt(cfg.d_model)
        self.learned = cfg.pos_encoding == "learned"
        if self.learned:
            self.positions = nn.Embedding(max_len, cfg.d_model)
            nn.init.normal_(self.positions.weight, std=0.02)
        else:
            self.register_buffer("pe", sinusoidal_table(max_len, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: Tensor, position_ids: Tensor) -> Tensor:  # [B, N] -> [B, N, D]
        pos = self.positions(position_ids) if self.learned else self.pe[position_ids]
        return self.dropout(self.tokens(ids) * self.scale + pos)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = Embedding(cfg.src_vocab_size, cfg, cfg.max_source_len)
        # +1: position ids run 0..max_target_len inclusive (bos + max_target_len tokens)
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, cfg, cfg.max_target_len + 1)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        # Pre-norm needs a final LayerNorm (the residual stream is never normalized otherwise).
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_placement == "pre" else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tgt_embed.tokens.weight

    # ---- encoder -------------------------------------------------------------------
    def encode(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """[B, S] ids and mask -> memory [B, S, D] and encoder_attention_bias [B, 1, 1, S]."""
        bias = padding_bias(attention_mask)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :].expand_as(input_ids)
        x = self.src_embed(input_ids, positions)
        for layer in self.encoder_layers:
            x = layer(x, bias)
        return self.encoder_norm(x), bias

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Each decoder layer's cross-attention K/V, projected once per source."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]

    # ---- decoder -------------------------------------------------------------------
    def decode(
        self,
        input_ids: Tensor,  # [B, T]
        position_ids: Tensor,  # [B, T]
        self_bias: Tensor,  # [B, 1, T, P+T]
        cross_kv: list[KV],
        cross_bias: Tensor,  # [B, 1, 1, S]
        past: list[KV] | None = None,
    ) -> tuple[Tensor, list[KV], list[Tensor]]:
        """-> logits [B, T, V], present self-attention K/V per layer, cross weights per layer."""
        x = self.tgt_embed(input_ids, position_ids)
        presents, cross_weights = [], []
        for i, layer in enumerate(self.decoder_layers):
            x, present, weights = layer(x, self_bias, cross_kv[i], cross_bias, None if past is None else past[i])
            presents.append(present)
            cross_weights.append(weights)
        return self.lm_head(self.decoder_norm(x)), presents, cross_weights

    def forward(self, src_ids: Tensor, src_mask: Tensor, tgt_ids: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher-forced logits [B, T, V]; tgt_ids start with bos and are right-padded."""
        memory, cross_bias = self.encode(src_ids, src_mask)
        t = tgt_ids.shape[1]
        positions = torch.arange(t, device=tgt_ids.device)[None, :].expand_as(tgt_ids)
        logits, _, _ = self.decode(tgt_ids, positions, decoder_self_bias(tgt_mask, t), self.cross_kv(memory), cross_bias)
        return logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
