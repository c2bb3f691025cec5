"""POST /score: the served model's log-probabilities of given answers (teacher forcing; service/requests/scoring.py).

    POST /score {"inputs": "attention", "targets": ["AH0 T EH1 N SH AH0 N", "AE1 T EH1 N SH AH0 N"]}
    -> {"scores": [{"target", "total", "score", "tokens": [{"id", "text", "logprob", "special"}, ...]}, ...]}

The guards, the error shape and the request bound are the generation routes'. Each request counts in
`attnserve_requests_total{route="/score"}`.
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from attnserve.service.http.dependencies import GENERATION_GUARDS, ServiceDep
from attnserve.service.http.responses import ERROR_RESPONSES, wire_steps, wire_tokens
from attnserve.service.http.schemas import RANGE, Token
from attnserve.service.requests.scoring import admit_scores

ROUTE = "/score"
MAX_TARGETS_NOTE = "At most the server's `max_batch_size` targets per request."

router = APIRouter(dependencies=GENERATION_GUARDS, responses=ERROR_RESPONSES)


class ScoreParameters(BaseModel):
    """Scoring parameters; an unknown key is refused by name."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    top_n_tokens: int | None = Field(
        None,
        json_schema_extra=RANGE["top_n_tokens"],
        description="Per target token, the n tokens the model found most likely there; at most `max_top_n_tokens`.",
    )


class ScoreRequest(BaseModel):
    """Body of `POST /score`."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    inputs: str = Field(
        ...,
        description="The input; for a word-level bundle, one word (read as /generate reads it: not empty or blank).",
        examples=["read"],
    )
    targets: list[str | list[int]] = Field(
        ...,
        min_length=1,
        description="The answers to score, in the model's output symbols (for G2P: ARPAbet with stress, space-separated), "
        "or each as the token ids a generation's `details.tokens` gave (its end token left out), which scores an answer "
        "exactly as it was generated where the tokenizer would split its text otherwise. " + MAX_TARGETS_NOTE,
        examples=[["R IY1 D", "R EH1 D"]],
    )
    parameters: ScoreParameters | None = Field(None, description="Scoring parameters.")


class TargetScore(BaseModel):
    target: str = Field(..., description="The target as given (for token ids, their text).")
    total: float = Field(
        ..., description="Its log-probability under the served model: the sum over its tokens, end token included."
    )
    score: float = Field(
        ..., description="Length-normalised: the mean log-probability of its tokens, end token included (the n-best's score)."
    )
    tokens: list[Token] = Field(..., description="Its tokens with their log-probabilities, the end token last.")
    top_tokens: list[list[Token]] | None = Field(None, description="Per token, the top_n_tokens most likely there (when asked).")


class ScoreResponse(BaseModel):
    scores: list[TargetScore] = Field(..., description="One per target, in the order given.")
    input_length: int = Field(..., description="The input's length in source tokens.")


@router.post(ROUTE, response_model=ScoreResponse, summary="Score given answers for one input under the served model")
async def score(svc: ServiceDep, body: ScoreRequest) -> ScoreResponse:
    t_arrival = time.perf_counter()
    p = body.parameters or ScoreParameters()
    top_n = p.top_n_tokens or 0
    svc.limits.score_top_n_tokens(top_n)
    job = admit_scores(svc.requests, body.inputs, body.targets, top_n_tokens=top_n, loop=svc.loop)
    results = await job.finished()
    svc.metrics.input_tokens.observe(job.input_length)
    svc.metrics.request_done(ROUTE, "success")
    svc.metrics.request_duration.observe(time.perf_counter() - t_arrival)
    return ScoreResponse(
        scores=[
            TargetScore(
                target=r.target,
                total=r.total,
                score=r.score,
                tokens=wire_tokens(r.tokens),
                top_tokens=wire_steps(r.top_tokens),
            )
            for r in results
        ],
        input_length=job.input_length,
    )
