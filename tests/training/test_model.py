"""The Transformer's mechanics, proven on tiny random models (no training needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnserve.service.engine.options import DecodingOptions
from attnserve.training.config import ModelConfig
from attnserve.training.decode import generate, generate_ids
from attnserve.training.model import (
    NEG_INF,
    MultiHeadAttention,
    Transformer,
    decoder_self_bias,
    padding_bias,
    sinusoidal_table,
)

PAD, BOS, EOS = 0, 1, 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_config(**overrides) -> ModelConfig:
    base = dict(
        src_vocab_size=13,
        tgt_vocab_size=11,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        max_source_len=16,
        max_target_len=16,
        dropout=0.0,
    )
    base.update(overrides)
    return ModelConfig(**base)


def make_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(**overrides)).eval()


def random_ids(gen: torch.Generator, b: int, n: int, vocab: int) -> torch.Tensor:
    return torch.randint(4, vocab, (b, n), generator=gen)  # no special ids inside


# ---- attention ----------------------------------------------------------------------------
def test_attention_weights_sum_to_one_over_keys():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=32, n_heads=4, dropout=0.0)
    x = torch.randn(3, 7, 32)
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    _, (k, v), weights = attn(x, padding_bias(mask))
    assert weights.shape == (3, 4, 7, 7)  # [B, H, T, L]
    assert k.shape == v.shape == (3, 4, 7, 8)  # [B, H, L, Dh]
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 7), atol=1e-6, rtol=0)
    assert (weights >= 0).all()


def test_attention_is_scaled_dot_product_of_the_projections():
    """out = W_o · concat_h softmax(Q_h K_h^T / sqrt(d_k)) V_h, computed here independently."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=32, n_heads=4, dropout=0.0)
    x, mem = torch.randn(2, 5, 32), torch.randn(2, 6, 32)
    out, _, weights = attn(x, torch.zeros(1, 1, 1, 6), static_kv=attn.project_kv(mem))

    def heads(t):  # [B, N, D] -> [B, H, N, Dh]
        return t.view(t.shape[0], t.shape[1], 4, 8).transpose(1, 2)

    q, k, v = heads(attn.q_proj(x)), heads(attn.k_proj(mem)), heads(attn.v_proj(mem))
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
    expected = attn.out_proj((a @ v).transpose(1, 2).reshape(2, 5, 32))
    torch.testing.assert_close(weights, a, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    # and the same as PyTorch's fused kernel on the same projections
    fused = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(a @ v, fused, atol=1e-6, rtol=1e-5)


def test_padding_keys_get_no_weight():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=32, n_heads=4, dropout=0.0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    _, _, weights = attn(torch.randn(2, 5, 32), padding_bias(mask))
    assert (weights[0, :, :, 3:] == 0).all()  # exp(-1e9) underflows to exactly 0
    assert (weights[0, :, :, :3] > 0).all()
    assert (weights[1] > 0).all()


def test_padded_source_content_does_not_change_the_output():
    model = make_model()
    gen = torch.Generator().manual_seed(1)
    src = random_ids(gen, 2, 8, 13)
    src_mask = torch.tensor([[1] * 5 + [0] * 3, [1] * 8])
    tgt = torch.cat([torch.full((2, 1), BOS), random_ids(gen, 2, 5, 11)], dim=1)
    tgt_mask = torch.ones_like(tgt)
    before = model(src, src_mask, tgt, tgt_mask)
    other = src.clone()
    other[0, 5:] = torch.tensor([7, 8, 9])  # garbage where the mask says padding
    after = model(other, src_mask, tgt, tgt_mask)
    torch.testing.assert_close(before, after, atol=1e-6, rtol=0)


def test_bias_is_finite_and_causal():
    bias = decoder_self_bias(torch.tensor([[0, 1, 1, 1]]), new_len=2)  # [B, 1, T, P+T]
    assert bias.shape == (1, 1, 2, 4)
    assert torch.isfinite(bias).all()
    allowed = bias[0, 0] == 0
    # query slot 2 sees slots 1..2; query slot 3 sees 1..3; padding slot 0 never
    assert allowed.tolist() == [[False, True, True, False], [False, True, True, True]]
    assert bias.min().item() >= 2 * NEG_INF  # padding and future may add up: still finite


# ---- masks in the full model ------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_causal_mask_future_token_does_not_change_earlier_outputs(norm):
    model = make_model(norm_placement=norm)
    gen = torch.Generator().manual_seed(2)
    src = random_ids(gen, 1, 6, 13)
    src_mask = torch.ones_like(src)
    tgt = torch.cat([torch.full((1, 1), BOS), random_ids(gen, 1, 7, 11)], dim=1)  # [1, 8]
    base = model(src, src_mask, tgt, torch.ones_like(tgt))
    j = 5
    changed = tgt.clone()
    changed[0, j] = 4 if tgt[0, j] != 4 else 5
    out = model(src, src_mask, changed, torch.ones_like(changed))
    torch.testing.assert_close(out[:, :j], base[:, :j], atol=0, rtol=0)  # bit-identical before j
    assert (out[:, j:] - base[:, j:]).abs().amax(-1).min() > 1e-4  # position j and later see it


# ---- positions -------------------------------------------------------------------------------
def test_sinusoidal_encoding_matches_the_formula():
    d, table = 16, sinusoidal_table(50, 16)
    assert table.shape == (50, d)
    for p in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embedding_is_scaled_tokens_plus_position_of_explicit_ids():
    model = make_model()
    emb = model.tgt_embed
    ids = torch.tensor([[5, 6, 7]])
    positions = torch.tensor([[4, 0, 9]])  # any order: rows may sit at any position
    expected = emb.tokens(ids) * math.sqrt(32) + sinusoidal_table(17, 32)[positions]
    torch.testing.assert_close(emb(ids, positions), expected, atol=1e-6, rtol=0)


# ---- the KV cache ----------------------------------------------------------------------------
MODEL_VARIANTS = [
    dict(),
    dict(norm_placement="post"),
    dict(pos_encoding="learned"),
    dict(activation="gelu", tie_embeddings=False),
]


@pytest.mark.parametrize("variant", MODEL_VARIANTS, ids=["pre-sinusoidal", "post-norm", "learned-pos", "gelu-untied"])
def test_cached_decoding_matches_full_forward(variant):
    model = make_model(**variant)
    gen = torch.Generator().manual_seed(3)
    b, s, t = 3, 7, 9
    src = random_ids(gen, b, s, 13)
    src_mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]])
    tgt = torch.cat([torch.full((b, 1), BOS), random_ids(gen, b, t - 1, 11)], dim=1)
    with torch.no_grad():
        full = model(src, src_mask, tgt, torch.ones_like(tgt))  # [B, T, V]
        memory, cross_bias = model.encode(src, src_mask)
        cross = model.cross_kv(memory)
        past = None
        for step in range(t):
            positions = torch.full((b, 1), step)
            self_bias = decoder_self_bias(torch.ones(b, step + 1, dtype=torch.long), 1)
            logits, past, _ = model.decode(tgt[:, step : step + 1], positions, self_bias, cross, cross_bias, past)
            assert past[0][0].shape == (b, 4, step + 1, 8)  # the cache grew by one position
            torch.testing.assert_close(logits[:, 0], full[:, step], atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", MODEL_VARIANTS[:3], ids=["pre-sinusoidal", "post-norm", "learned-pos"])
def test_cached_decoding_rows_at_different_positions_in_one_batch(variant):
    """Rows that joined at different times share a step: their pasts are left-padded
    (decoder_attention_mask 0 there) and each row carries its own position ids."""
    model = make_model(**variant)
    gen = torch.Generator().manual_seed(4)
    prefix_lens = [6, 2, 4]  # real tokens (bos included) already decoded per row
    new_steps = 4
    b = len(prefix_lens)
    src = random_ids(gen, b, 5, 13)
    src_mask = torch.ones_like(src)
    rows = [torch.cat([torch.tensor([BOS]), random_ids(gen, 1, n + new_steps - 1, 11)[0]]) for n in prefix_lens]

    with torch.no_grad():
        # reference: each row alone, no padding, no cache
        reference = [model(src[i : i + 1], src_mask[i : i + 1], rows[i][None], torch.ones(1, len(rows[i]))) for i in range(b)]

        memory, cross_bias = model.encode(src, src_mask)
        cross = model.cross_kv(memory)
        # prefill: left-pad every prefix to the longest
        p = max(prefix_lens)
        ids = torch.full((b, p), PAD)
        mask = torch.zeros(b, p, dtype=torch.long)
        positions = torch.zeros(b, p, dtype=torch.long)
        for i, n in enumerate(prefix_lens):
            ids[i, p - n :] = rows[i][:n]
            mask[i, p - n :] = 1
            positions[i, p - n :] = torch.arange(n)
        logits, past, _ = model.decode(ids, positions, decoder_self_bias(mask, p), cross, cross_bias)
        for i, n in enumerate(prefix_lens):
            torch.testing.assert_close(logits[i, -1], reference[i][0, n - 1], atol=1e-5, rtol=0)
        # then one token per row per step, each at its own position
        for k in range(new_steps - 1):
            step_ids = torch.stack([rows[i][n + k] for i, n in enumerate(prefix_lens)])[:, None]
            step_pos = torch.tensor([[n + k] for n in prefix_lens])
            mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long)], dim=1)
            logits, past, _ = model.decode(step_ids, step_pos, decoder_self_bias(mask, 1), cross, cross_bias, past)
            for i, n in enumerate(prefix_lens):
                torch.testing.assert_close(logits[i, 0], reference[i][0, n + k], atol=1e-5, rtol=0)


def test_greedy_decode_equals_argmax_of_full_forward():
    model = make_model(seed=5)
    gen = torch.Generator().manual_seed(5)
    src = random_ids(gen, 4, 6, 13)
    lengths = [6, 3, 5, 6]
    sources = [src[i, :n].tolist() for i, n in enumerate(lengths)]
    got = generate_ids(model, sources, DecodingOptions(max_new_tokens=8))
    with torch.no_grad():
        for i in range(4):
            seq = [BOS]
            expected: list[int] = []
            one = torch.tensor([sources[i]])
            for _ in range(8):
                tgt = torch.tensor([seq])
                nxt = int(model(one, torch.ones_like(one), tgt, torch.ones_like(tgt))[0, -1].argmax())
                if nxt == EOS:
                    break
                expected.append(nxt)
                seq.append(nxt)
            assert got[i] == expected


def test_greedy_decode_stops_at_eos():
    model = make_model(seed=6)
    with torch.no_grad():  # make eos the argmax from the first step: every row ends empty
        model.lm_head.weight.zero_()
        model.lm_head.weight[EOS] = 1.0
        model.decoder_norm.bias.fill_(1.0)
        model.decoder_norm.weight.zero_()
    assert generate_ids(model, [[5, 6, 7]], DecodingOptions(max_new_tokens=10)) == [[]]


def test_beam_search_with_the_cache_equals_recomputing_the_prefix():
    """The cache follows the beams (rows gathered by parent): the same hypotheses and scores as
    recomputing every prefix from scratch, beside greedy and sampled requests."""
    model = make_model(seed=7)
    gen = torch.Generator().manual_seed(7)
    sources = [random_ids(gen, 1, n, 13)[0].tolist() for n in (4, 6, 2, 5)]
    opts = [
        DecodingOptions(max_new_tokens=9, best_of=3),
        DecodingOptions(max_new_tokens=9),
        DecodingOptions(max_new_tokens=9, num_beams=4, best_of=2),
        DecodingOptions(max_new_tokens=9, do_sample=True, seed=4, best_of=2),
    ]
    cached = generate(model, sources, opts)
    full = generate(model, sources, opts, use_cache=False)
    for a, b in zip(cached, full):
        assert [h.token_ids for h in a.hypotheses] == [h.token_ids for h in b.hypotheses]
        assert np.allclose([h.score for h in a.hypotheses], [h.score for h in b.hypotheses], atol=1e-5)
    assert len(cached[0].hypotheses) == 3 and len(cached[2].hypotheses) == 2


# ---- embeddings tying and config -----------------------------------------------------------
def test_tied_embeddings_are_one_parameter_through_training_and_reload(tmp_path):
    model = make_model()
    assert model.lm_head.weight is model.tgt_embed.tokens.weight
    untied = make_model(tie_embeddings=False)
    assert untied.lm_head.weight is not untied.tgt_embed.tokens.weight
    assert untied.num_parameters() == model.num_parameters() + 11 * 32  # one V x D matrix more

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    src = torch.tensor([[5, 6, 7, 8]])
    tgt = torch.tensor([[BOS, 5, 6]])
    before = model.lm_head.weight.detach().clone()
    loss = model(src, torch.ones_like(src), tgt, torch.ones_like(tgt)).sum()
    loss.backward()
    opt.step()
    assert not torch.equal(before, model.lm_head.weight)  # it did train
    assert model.lm_head.weight is model.tgt_embed.tokens.weight

    path = tmp_path / "m.pt"
    torch.save({"config": model.cfg.to_dict(), "state_dict": model.state_dict()}, path)
    ckpt = torch.load(path, weights_only=False)
    again = Transformer(ModelConfig.from_dict(ckpt["config"]))
    again.load_state_dict(ckpt["state_dict"])
    assert again.lm_head.weight is again.tgt_embed.tokens.weight
    torch.testing.assert_close(again.lm_head.weight, model.lm_head.weight, atol=0, rtol=0)


def test_model_config_round_trips_and_rejects_bad_values():
    cfg = tiny_config(norm_placement="post", pos_encoding="learned")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert all(isinstance(v, int | float | str | bool) for v in cfg.to_dict().values())  # plain JSON values
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="norm_placement"):
        tiny_config(norm_placement="middle")
    with pytest.raises(ValueError, match="valid keys"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_layers": 3})
