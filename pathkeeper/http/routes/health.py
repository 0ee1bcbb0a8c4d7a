"""Liveness and readiness probes (no API key needed)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from coordinator.api import Coordinator
from coordinator.errors import CoordinatorError
from coordinator.indexing import Lag, probe_lag
from pathkeeper.http.deps import ConsumerDep, CoordDep, SearcherDep, SettingsDep, public
from pathkeeper.http.errors import DATABASE_DOWN, SEARCH_DOWN, outage_message
from pathkeeper.http.schemas import HealthOut, ReadyOut
from pathkeeper.http.threads import blocking

router = APIRouter(tags=["health"])
log = logging.getLogger("pathkeeper.service")

#: Seconds /readyz waits for the search server's answer: a probe must answer quickly.
SEARCH_PROBE_SECONDS = 2.0


@router.get("/healthz", response_model=HealthOut, dependencies=[Depends(public)])
async def healthz() -> HealthOut:
    """Liveness: the process answers."""
    return HealthOut(status="ok")


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut}},
            dependencies=[Depends(public)])
@blocking
def readyz(coord: CoordDep, settings: SettingsDep, searcher: SearcherDep,
           consumer: ConsumerDep) -> JSONResponse:
    """Readiness: PostgreSQL answers and, when configured, the search server does and its
    index is there; reports the indexer's lag (does not fail on it)."""
    retry = {"Retry-After": str(settings.retry_after_seconds)}
    try:
        lag = _worst_lag(coord, consumer)
    except (SQLAlchemyError, CoordinatorError) as exc:
        log.warning("readiness: database check failed: %s", exc)
        out = ReadyOut(status="unavailable", postgres=False,
                       detail=outage_message(exc) or DATABASE_DOWN)
        return JSONResponse(out.model_dump(mode="json"), 503, headers=retry)
    search = None if searcher is None else searcher.reachable(SEARCH_PROBE_SECONDS)
    if search is False:
        out = ReadyOut(status="unavailable", postgres=True, search=False, detail=SEARCH_DOWN)
        return JSONResponse(out.model_dump(mode="json"), 503, headers=retry)
    indexed = lag is not None and lag.checkpoint != 0  # past the start of the log
    lost = searcher.index_lost() if searcher is not None and indexed else None
    if lost is not None:
        out = ReadyOut(status="unavailable", postgres=True, search=True, detail=lost)
        return JSONResponse(out.model_dump(mode="json"), 503, headers=retry)
    out = ReadyOut(status="ok", postgres=True, search=search,
                   indexer_lag_events=None if lag is None else lag.events,
                   indexer_lag_seconds=None if lag is None else lag.seconds)
    return JSONResponse(out.model_dump(mode="json"), 200)


def _worst_lag(coord: Coordinator, consumer: str) -> Lag | None:
    """The lag of the shard furthest behind (every shard must answer: a namespace on one
    that does not cannot be served); None if the indexer never ran on any. Positions of
    different shards are never compared: ``checkpoint`` only says whether one has begun."""
    lags = [lag for _, engine in coord.shard_engines()
            if (lag := probe_lag(engine, consumer)) is not None]
    if not lags:
        return None
    return Lag(checkpoint=max(lag.checkpoint for lag in lags),
               events=max(lag.events for lag in lags),
               seconds=max(lag.seconds for lag in lags))
