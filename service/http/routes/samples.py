"""GET /samples: inputs this server's model was built for, from the bundle's own parity corpus.

The export writes `parity_corpus.json` (hashed in `bundle.json` like every file) with the sources it proved
parity on: inputs of the model's own task, whatever that task is. A client that knows nothing of the model,
`attnserve-loadtest` without `--input` above all, sends these.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel, Field

from service.http import errors
from service.http.dependencies import ServiceDep
from service.http.schemas import ErrorResponse

ROUTE = "/samples"
MAX_SAMPLES = 500  # "a few hundred": enough that a load test's rows vary, small enough to send at once

router = APIRouter()


class SamplesResponse(BaseModel):
    samples: list[str] = Field(..., description="Inputs of the model's own task, in the parity corpus' order.")
    source: str = Field(..., description="Where they come from.", examples=["parity_corpus.json (g2p-en)"])


@lru_cache(maxsize=4)
def parity_sources(path: Path) -> tuple[str, ...]:
    """The parity corpus' sources (at most MAX_SAMPLES); () when the file has none."""
    try:
        corpus = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    sources = corpus.get("sources") if isinstance(corpus, dict) else None
    if not isinstance(sources, list):
        return ()
    return tuple(s for s in sources if isinstance(s, str) and s.strip())[:MAX_SAMPLES]


@router.get(
    ROUTE,
    response_model=SamplesResponse,
    responses={404: {"model": ErrorResponse, "description": "The bundle has no parity corpus"}},
    summary="Sample inputs for this model (a load test's default)",
)
async def samples(svc: ServiceDep) -> SamplesResponse:
    bundle = svc.engine.bundle
    name = bundle.meta.get("parity_corpus")
    found = parity_sources(bundle.dir / name) if name else ()
    if not found:
        raise errors.APIError(404, "not_found", "this model's bundle has no parity corpus to take samples from")
    return SamplesResponse(samples=list(found), source=f"{name} ({bundle.model_id})")
