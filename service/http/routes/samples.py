"""GET /samples: inputs of the served model's own task, from its bundle's parity corpus (service/requests/samples.py).

A client that knows nothing of the model, `attnserve-loadtest` without `--input` above all, sends these.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from attnserve.service.http import errors
from attnserve.service.http.dependencies import ServiceDep
from attnserve.service.http.schemas import ErrorResponse
from attnserve.service.requests.samples import sample_inputs

ROUTE = "/samples"

router = APIRouter()


class SamplesResponse(BaseModel):
    samples: list[str] = Field(..., description="Inputs of the model's own task, in the parity corpus' order.")
    source: str = Field(..., description="Where they come from.", examples=["parity_corpus.json (g2p-en)"])


@router.get(
    ROUTE,
    response_model=SamplesResponse,
    responses={404: {"model": ErrorResponse, "description": "The bundle has no parity corpus"}},
    summary="Sample inputs for this model (a load test's default)",
)
async def samples(svc: ServiceDep) -> SamplesResponse:
    found = sample_inputs(svc.requests)
    if not found:
        raise errors.APIError(404, "not_found", "this model's bundle has no parity corpus to take samples from")
    bundle = svc.engine.bundle
    return SamplesResponse(samples=found, source=f"{bundle.meta['parity_corpus']} ({bundle.model_id})")
