"""The same model in CTranslate2, the speed target of the engine (attnserve-bench only).

CTranslate2 is a C++ inference engine for Transformers with its own cache and
batching; it is the bar the ONNX Runtime engine is measured against, never a
serving path. Its Transformer spec matches this model exactly when filled from
the state dict: pre-norm layers with final LayerNorms, token embeddings scaled
by sqrt(D) plus an explicit position table (ours, so the sin/cos layout
matches), fused QKV, tied output projection. `ctranslate2` is an optional
dependency (the `dev` extra: `pip install -e '.[dev]'` from the checkout).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from attnserve.training.model import Transformer


def _np(t) -> np.ndarray:
    return t.detach().cpu().float().numpy()


def _linear(spec, lin) -> None:
    spec.weight = _np(lin.weight)
    if lin.bias is not None:
        spec.bias = _np(lin.bias)


def _norm(spec, ln) -> None:
    spec.gamma = _np(ln.weight)
    spec.beta = _np(ln.bias)


def _attention(spec, attn, self_attention: bool) -> None:
    # ctranslate2 is optional (only the bench's ct2 backend needs it): imported where it is used
    from ctranslate2.converters import utils
    from ctranslate2.specs import common_spec

    q, k, v = (common_spec.LinearSpec() for _ in range(3))
    for s, lin in ((q, attn.q_proj), (k, attn.k_proj), (v, attn.v_proj)):
        _linear(s, lin)
    if self_attention:
        utils.fuse_linear(spec.linear[0], [q, k, v])
    else:
        spec.linear[0].weight, spec.linear[0].bias = q.weight, q.bias
        utils.fuse_linear(spec.linear[1], [k, v])
    _linear(spec.linear[-1], attn.out_proj)


def convert(model: Transformer, src_tok: Tokenizer, tgt_tok: Tokenizer, out_dir: Path, quantization: str = "float32") -> Path:
    """Write a CTranslate2 model directory for `model`; quantization "float32" or "int8"."""
    from ctranslate2.specs import common_spec, transformer_spec  # optional: only the ct2 backend

    cfg = model.cfg
    if cfg.norm_placement != "pre":
        raise ValueError("the CTranslate2 comparison supports pre-norm models only")
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers),
        cfg.n_heads,
        pre_norm=True,
        activation=common_spec.Activation.GELU if cfg.activation == "gelu" else common_spec.Activation.RELU,
    )
    spec.config.layer_norm_epsilon = model.encoder_norm.eps
    for side_spec, embed in ((spec.encoder, model.src_embed), (spec.decoder, model.tgt_embed)):
        emb = side_spec.embeddings
        (emb[0] if isinstance(emb, list) else emb).weight = _np(embed.tokens.weight)
        side_spec.scale_embeddings = True
        table = embed.positions.weight if embed.learned else embed.pe
        side_spec.position_encodings.encodings = _np(table)
    _norm(spec.encoder.layer_norm, model.encoder_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn, True)
        _norm(layer_spec.self_attention.layer_norm, layer.attn_res.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.up)
        _linear(layer_spec.ffn.linear_1, layer.ffn.down)
        _norm(layer_spec.ffn.layer_norm, layer.ffn_res.norm)
    _norm(spec.decoder.layer_norm, model.decoder_norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn, True)
        _norm(layer_spec.self_attention.layer_norm, layer.self_res.norm)
        _attention(layer_spec.attention, layer.cross_attn, False)
        _norm(layer_spec.attention.layer_norm, layer.cross_res.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.up)
        _linear(layer_spec.ffn.linear_1, layer.ffn.down)
        _norm(layer_spec.ffn.layer_norm, layer.ffn_res.norm)
    spec.decoder.projection.weight = _np(model.lm_head.weight)
    spec.config.decoder_start_token = "<s>"
    spec.register_source_vocabulary([src_tok.id_to_token(i) for i in range(src_tok.get_vocab_size())])
    spec.register_target_vocabulary([tgt_tok.id_to_token(i) for i in range(tgt_tok.get_vocab_size())])
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir


def translator(model_dir: Path, threads: int):
    import ctranslate2  # optional: only the ct2 backend

    return ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=threads, inter_threads=1)


def generate(
    translator, src_tok: Tokenizer, tgt_tok: Tokenizer, sources: list[list[int]], n: int, min_len: int = 0, beam_size: int = 1
) -> list[list[int]]:
    """Greedy (or beam search's best) ids for each source (one batch); `min_len` forces lengths as min_new_tokens does."""
    tokens = [[src_tok.id_to_token(i) for i in ids] for ids in sources]
    out = translator.translate_batch(
        tokens,
        beam_size=beam_size,
        max_decoding_length=n,
        min_decoding_length=min_len,
        max_batch_size=len(tokens),
    )
    return [[tgt_tok.token_to_id(t) for t in r.hypotheses[0]] for r in out]
