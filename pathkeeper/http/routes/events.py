"""The change feed: a namespace's events in commit order, long-polled."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from coordinator import paths
from pathkeeper.http.deps import MAX_PAGE, MAX_WAIT, READ, CoordDep, HubDep, NsParam, SettingsDep
from pathkeeper.http.feed import follow, parse_after
from pathkeeper.http.operations import NAMESPACE_URL
from pathkeeper.http.schemas import EventsOut
from pathkeeper.http.threads import blocking

router = APIRouter(tags=["events"])


@router.get(f"{NAMESPACE_URL}/events", response_model=EventsOut, dependencies=[Depends(READ)])
@blocking
def events(
    ns: NsParam,
    coord: CoordDep,
    hub: HubDep,
    settings: SettingsDep,
    after: Annotated[str | None, Query(
        max_length=20,
        description="the cursor of the previous page; 'now' (the end of the log) or "
                    "'horizon' (the oldest event kept); none: from the start",
    )] = None,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0.0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> EventsOut:
    """Events of the namespace in commit order after ``after``; with ``wait``, long-polls
    up to that many seconds for the first one. Continue from the returned ``cursor``.
    A cursor below the compaction horizon answers 410 ``cursor_expired``, one past the
    end of the log 409 ``cursor_ahead``: start again at ``now`` or ``horizon``."""
    wait = min(wait, settings.max_feed_wait_seconds)
    limit = min(limit, settings.max_page)
    paths.validate_namespace(ns)
    return follow(coord, hub, ns, parse_after(after), limit, wait)
