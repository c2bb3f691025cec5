"""POST /explain's response body: one request's output and the cross-attention of every output token, and how
an `Explanation` of the explain engine (service/engine/explain.py) is rendered into it."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from attnserve.service.engine.engine import Engine
from attnserve.service.engine.explain import Explanation

FinishReason = Literal["length", "eos_token", "stop_sequence"]  # TGI's finish reasons (schemas.py's details use them too)


class SourceToken(BaseModel):
    id: int = Field(..., description="Source token id.")
    token: str = Field(..., description="The source tokenizer's piece for it (for G2P: one lower-cased character).")


class ExplainToken(BaseModel):
    id: int = Field(..., description="Token id.")
    token: str = Field(..., description="The target tokenizer's piece (for G2P: one phoneme, e.g. 'AH0').")
    text: str = Field(..., description="Text this token adds, as /generate_stream streams it ('' for the end token).")
    logprob: float = Field(..., description="Log-probability of the token under the model's distribution at this step.")
    prob: float = Field(..., description="exp(logprob).")
    special: bool = Field(..., description="True for the end-of-sequence token (it has a row too: the model chose to stop).")


class ExplainResponse(BaseModel):
    """One request's output and its cross-attention. T = len(tokens) rows, S = len(source_tokens) columns."""

    generated_text: str = Field(..., description="The generated text (as /generate answers it).", examples=["K AE1 T"])
    finish_reason: FinishReason = Field(..., description="Why generation stopped.")
    seed: int | None = Field(None, description="Seed a sampled request used (null for greedy).")
    sampled: bool = Field(..., description="True when tokens were sampled, false for greedy.")
    source_tokens: list[SourceToken] = Field(..., description="The input as the model reads it: the S columns.")
    tokens: list[ExplainToken] = Field(..., description="The generated tokens, the end token included: the T rows.")
    layers: int = Field(..., description="Decoder layers L.")
    heads: int = Field(..., description="Attention heads H per layer.")
    cross_attentions: list[list[list[list[float]]]] = Field(
        ...,
        description="[L][H][T][S]: weight of source token s when layer l, head h produced output token t; "
        "each row over s sums to 1.",
    )
    cross_attention_mean: list[list[list[float]]] = Field(
        ..., description="[L][T][S]: the weights averaged over the heads of each layer."
    )
    graph: str = Field(..., description="The graph that produced the weights (decoder.explain.onnx, fp32).")
    serving_variant: str = Field(
        ..., description="The variant /generate serves: its logits chose the tokens; the weights are the fp32 graph's."
    )


def explanation_response(x: Explanation, engine: Engine, graph: str, full_text_prefix: str = "") -> ExplainResponse:
    src_tok, tgt_tok = engine.src_tokenizer, engine.tgt_tokenizer
    a = x.attention.astype(np.float64)
    return ExplainResponse(
        generated_text=full_text_prefix + x.text,
        finish_reason=x.finish_reason,
        seed=x.seed,
        sampled=x.seed is not None,
        source_tokens=[SourceToken(id=i, token=src_tok.id_to_token(i) or "") for i in x.source_ids],
        tokens=[
            ExplainToken(id=i, token=tgt_tok.id_to_token(i) or "", text=t, logprob=lp, prob=math.exp(lp), special=sp)
            for i, t, lp, sp in zip(x.token_ids, x.texts, x.logprobs, x.special)
        ],
        layers=a.shape[0],
        heads=a.shape[1],
        cross_attentions=np.round(a, 6).tolist(),
        cross_attention_mean=np.round(a.mean(axis=1), 6).tolist(),
        graph=f"{graph} (fp32)",
        serving_variant=engine.variant,
    )
