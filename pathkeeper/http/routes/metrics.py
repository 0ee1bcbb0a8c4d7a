"""``/metrics``: the service's Prometheus metrics (no API key needed, like the probes;
they name routes and pools, never namespaces, keys or paths)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from pathkeeper.http.deps import public
from pathkeeper.http.metrics import ServiceMetrics

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response, dependencies=[Depends(public)],
            responses={200: {"content": {"text/plain": {}},
                             "description": "Prometheus text format"}})
async def metrics(request: Request) -> Response:
    """Requests by route and status with their latency, in flight and refused by limits
    pool, the build (Prometheus text format)."""
    service: ServiceMetrics = request.app.state.metrics
    body, content_type = service.exposition()
    return Response(body, media_type=content_type)
