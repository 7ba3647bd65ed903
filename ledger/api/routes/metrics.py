"""GET /metrics: the ledger's Prometheus metrics (ledger/reads/metrics.py), text exposition
format."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from ledger.api.deps import MetricsDep

router = APIRouter(tags=["meta"])


@router.get("/metrics", include_in_schema=False)
async def metrics(registry: MetricsDep) -> Response:
    return Response(registry.exposition(), media_type=CONTENT_TYPE_LATEST)
