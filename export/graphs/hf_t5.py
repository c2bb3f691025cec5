"""A Hugging Face T5 checkpoint (v1.0, v1.1, Flan) behind the v1 writer's model interface, as export/graphs/hf.py
does for the BART-like families: `encode`, `cross_kv`, `decode`, `cfg`, over the checkpoint's own modules.

What T5 does differently, each read from the checkpoint:
- no position embeddings: a learned bias per head on each attention score, looked up by the bucket of the key's
  position minus the query's (bidirectional buckets in the encoder, causal ones in the decoder), computed by the
  first layer's table and shared by every layer of its stack; cross-attention has none;
- scores are not scaled by 1/sqrt(Dh) (T5 folds that into its initialisation);
- RMSNorm (T5LayerNorm) before each sublayer and at the end of each stack, no biases anywhere;
- the feed-forward is the checkpoint's own module: ReLU (v1.0) or gated GELU (v1.1, Flan);
- a tied head (v1.0) rescales the decoder output by d_model ** -0.5 first.

The decoder step knows each row's positions: its queries' from `position_ids`, its keys' by counting the real
slots of its self-attention mask, so rows with different past lengths share a step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnserve.export.graphs.hf import PortConfig
from attnserve.training.model import KV, NEG_INF, padding_bias


def _split(x: Tensor, n_heads: int) -> Tensor:
    b, n, d = x.shape
    return x.view(b, n, n_heads, d // n_heads).transpose(1, 2)  # [B, H, N, Dh]


def _attention(attn: nn.Module, y: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int) -> Tensor:
    """softmax(Q K^T + bias) V (no 1/sqrt(Dh): T5's), through the checkpoint's q and o projections."""
    b, t, _ = y.shape
    q = _split(attn.q(y), n_heads)  # [B, H, T, Dh]
    weights = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) + bias, dim=-1)  # [B, H, T, L]
    out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, -1)
    return attn.o(out)


class T5Seq2Seq(nn.Module):
    LAST_POSITION_LOGITS = True  # decode projects the last position alone (export/graphs/v1.py reads it)

    def __init__(self, hf_model: nn.Module, cfg: PortConfig):
        super().__init__()
        self.hf = hf_model.eval()
        self.cfg = cfg
        self.encoder = hf_model.encoder
        self.decoder = hf_model.decoder
        self.n_heads = cfg.n_heads
        self.rescale = bool(getattr(hf_model.config, "scale_decoder_outputs", hf_model.config.tie_word_embeddings))

    def _position_bias(self, stack: nn.Module, relative: Tensor, bidirectional: bool) -> Tensor:
        """relative [B, T, K] key minus query positions -> the stack's bias [B, H, T, K]."""
        sa = stack.block[0].layer[0].SelfAttention
        buckets = sa._relative_position_bucket(
            relative,
            bidirectional=bidirectional,
            num_buckets=sa.relative_attention_num_buckets,
            max_distance=sa.relative_attention_max_distance,
        )
        return sa.relative_attention_bias(buckets).permute(0, 3, 1, 2)

    def encode(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """[B, S] ids and mask -> memory [B, S, D] and encoder_attention_bias [B, 1, 1, S]."""
        bias = padding_bias(attention_mask)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        relative = (positions[None, :] - positions[:, None])[None].expand(input_ids.shape[0], -1, -1)
        scores_bias = self._position_bias(self.encoder, relative, True) + bias  # [B, H, S, S]
        x = self.encoder.embed_tokens(input_ids)
        h = self.n_heads
        for block in self.encoder.block:
            sa_layer, ff_layer = block.layer[0], block.layer[-1]
            y = sa_layer.layer_norm(x)
            a = sa_layer.SelfAttention
            x = x + _attention(a, y, _split(a.k(y), h), _split(a.v(y), h), scores_bias, h)
            x = x + ff_layer.DenseReluDense(ff_layer.layer_norm(x))
        return self.encoder.final_layer_norm(x), bias

    def cross_kv(self, memory: Tensor) -> list[KV]:
        h = self.n_heads
        cross = [block.layer[1].EncDecAttention for block in self.decoder.block]
        return [(_split(a.k(memory), h), _split(a.v(memory), h)) for a in cross]

    def decode(
        self,
        input_ids: Tensor,  # [B, T]
        position_ids: Tensor,  # [B, T]
        self_bias: Tensor,  # [B, 1, T, P+T]
        cross_kv: list[KV],
        cross_bias: Tensor,  # [B, 1, 1, S]
        past: list[KV] | None = None,
    ) -> tuple[Tensor, list[KV], list[Tensor]]:
        """-> logits [B, V] (the last position's), present self-attention K/V per layer, no cross weights."""
        # each key slot's position: the real slots counted (the last query sees every real slot of its row)
        real = (self_bias[:, 0, -1, :] > NEG_INF / 2).to(torch.long)  # [B, P+T]
        key_pos = torch.cumsum(real, dim=1) - 1
        relative = key_pos[:, None, :] - position_ids[:, :, None]  # [B, T, P+T]
        scores_bias = self._position_bias(self.decoder, relative, False) + self_bias  # [B, H, T, P+T]
        x = self.decoder.embed_tokens(input_ids)
        h = self.n_heads
        presents: list[KV] = []
        for i, block in enumerate(self.decoder.block):
            sa_layer, ca_layer, ff_layer = block.layer[0], block.layer[1], block.layer[-1]
            y = sa_layer.layer_norm(x)
            a = sa_layer.SelfAttention
            k, v = _split(a.k(y), h), _split(a.v(y), h)
            if past is not None:
                k, v = torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2)  # [B, H, P+T, Dh]
            presents.append((k, v))
            x = x + _attention(a, y, k, v, scores_bias, h)
            ck, cv = cross_kv[i]
            x = x + _attention(ca_layer.EncDecAttention, ca_layer.layer_norm(x), ck, cv, cross_bias, h)
            x = x + ff_layer.DenseReluDense(ff_layer.layer_norm(x))
        x = self.decoder.final_layer_norm(x[:, -1])  # [B, D]: the step's logits are its last position's alone
        if self.rescale:
            x = x * self.cfg.d_model**-0.5
        return self.hf.lm_head(x), presents, []
