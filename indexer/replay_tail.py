"""A rebuild's tail: the events after its bound, applied with the live worker's own
batch apply (``indexer.applier``), so the two agree."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Engine

from coordinator import Coordinator, Event
from coordinator.event_reader import WriterInFlight

from .applier import Applier
from .bulk import Rejected
from .errors import ReplayError
from .log_scan import BOUND_WAIT
from .progress import Progress
from .search_engine import SearchEngine

TAIL_BATCH = 5000
#: The tail is "caught up" when a read returns fewer events than this.
CAUGHT_UP_EVENTS = 500

#: ``apply(events, cursor)``: apply one ``read_events`` batch at version ``cursor``.
BatchApply = Callable[[list[Event], int], object]


def worker_batch_apply(
    engine: Engine, es: SearchEngine, target: str, rejected: list[Rejected]
) -> BatchApply:
    """The live worker's batch apply (``indexer.applier.Applier``), writing through the
    alias ``target``: the tail is applied exactly as the worker would, so the two
    agree. (The worker writes with ``require_alias``, so the target must be an
    alias: before the swap it is the ``building`` marker, which names exactly the
    new index; after it, the live alias itself.)"""
    applier = Applier(engine, es, target, rejected.append)
    return applier.apply


def catch_up(
    coord: Coordinator,
    after: int,
    apply: BatchApply,
    progress: Progress,
    *,
    until: int | None = None,
    namespaces: Sequence[str] | None = None,
) -> tuple[int, int]:
    """Apply events after ``after`` with ``apply``, in worker-sized batches, up to
    ``until`` (or until a read comes back nearly empty); returns (cursor, events)."""
    cursor, total, stuck = after, 0, 0
    writers: list[WriterInFlight] = []
    while True:
        events, nxt = coord.read_events(
            cursor, TAIL_BATCH, namespaces=namespaces, until=until, wait=BOUND_WAIT,
            on_slow=lambda w: writers.__setitem__(slice(None), w),
            contents=False,  # applied as the worker does: from PostgreSQL's rows
        )
        if events:
            apply(events, nxt)
            total += len(events)
            progress.advance(len(events))
        moved = nxt > cursor
        cursor = nxt
        if until is None:
            if len(events) < CAUGHT_UP_EVENTS:
                return cursor, total
        elif cursor >= until:
            return cursor, total
        elif not moved:
            # read_events gave up waiting for transactions in flight: try again, since
            # stopping short of ``until`` would leave a gap.
            stuck += 1
            if stuck > 10:
                names = "; ".join(str(w) for w in writers) or "none seen"
                raise ReplayError(
                    f"could not read the log up to position {until}: writers in flight: {names}"
                )
