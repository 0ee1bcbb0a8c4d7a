"""Where a rebuild's documents come from: the event log folded as of a position
(replay, ``indexer.setfold``) or one REPEATABLE READ snapshot of the live ``nodes``
rows (reindex).

With ``PATHKEEPER_REPLAY_FOLD_PART_EVENTS`` set, a long log is folded in parts
(``setfold.FoldPart``, by node id), one after the other on a thread of their own, while
the documents of the parts already folded load: the load starts after the first part's
fold instead of the whole fold. The parts read one exported snapshot, so their union is
the one fold's state (``indexer.setfold`` has the argument); at most two parts'
temporary tables exist at once (the one loading, the next folding). It is off by
default: it pays only where PostgreSQL has CPU the load does not use (its own server).
With PostgreSQL, the search node and replay on the same two cores, the later parts'
aggregates took that CPU from the load, which grew by what the fold saved (and the parts'
extra scans): replay of 100,000 nodes over 1,000,000 events at 0.60 of the raw bulk in
parts against 0.69 whole, side by side (``bench/README.md``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from sqlalchemy import Engine, text

from . import setfold
from .contract import rendered_action
from .errors import ReplayError
from .live_nodes import owned_namespaces, walk_entries
from .progress import Progress
from .setfold import FoldPart, SetFold

#: Events of the log per part of a replay's fold (estimated from the table's statistics),
#: ``PATHKEEPER_REPLAY_FOLD_PART_EVENTS``; 0 (the default): the whole fold at once. Each
#: part costs one more scan of the log (about a tenth of a 250,000-event part's aggregate).
PART_EVENTS = int(os.environ.get("PATHKEEPER_REPLAY_FOLD_PART_EVENTS", "0"))
MAX_PARTS = 8


def fold_parts(engine: Engine) -> int:
    """How many parts a replay's fold runs in: one per ``PART_EVENTS`` events of the log
    (PostgreSQL's estimate of the table's rows), at most ``MAX_PARTS``; one if
    ``PART_EVENTS`` is 0."""
    if PART_EVENTS <= 0:
        return 1
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT reltuples FROM pg_class WHERE oid = CAST('events' AS regclass)"
        )).scalar_one()
    return max(1, min(MAX_PARTS, math.ceil(max(0.0, float(rows)) / max(1, PART_EVENTS))))


def fold_log(
    engine: Engine,
    until: int,
    namespaces: Sequence[str] | None,
    progress: Progress,
) -> SetFold:
    """Fold the log as of ``until`` (replay's source), from the newest snapshot at or below
    it plus the events after it, by PostgreSQL (``indexer.setfold``); the caller closes
    the result. Raises ``ReplayError`` if compaction deleted events it would need."""
    progress.phase("fold events", unit="events")
    folded = _fold(engine, until, namespaces)
    _noted(folded, progress)
    return folded


def _fold(engine: Engine, until: int, namespaces: Sequence[str] | None,
          part: FoldPart | None = None, snapshot: str | None = None) -> SetFold:
    try:
        return setfold.fold(engine, until=until, namespaces=namespaces, part=part,
                            snapshot=snapshot)
    except setfold.LogCompacted as exc:
        raise ReplayError(str(exc)) from exc


def _noted(folded: SetFold, progress: Progress) -> None:
    """Count a fold's events and tell its base and anomalies. A later part folds during
    the load, whose counter is of documents: it is told, not counted."""
    part = folded.part
    if part is not None and part.index > 0:
        progress.note(f"folded part {part.index + 1} of {part.of}: {folded.events} events")
    else:
        progress.advance(folded.events)
    if (part is None or part.index == 0) and folded.base.snapshot_id is not None:
        progress.note(f"started from snapshot {folded.base.snapshot_id} "
                      f"(position {folded.base.position}) plus {folded.events} events")
    if folded.anomalies.count:
        progress.note(
            f"the log has {folded.anomalies.count} inconsistencies, first: "
            f"{folded.anomalies.first[:3]} (run `pathkeeper verify` for the full story)"
        )


class PartsFold:
    """The log folded in ``parts`` parts, each folded on a thread while the one before is
    read (``nodes``); the first is folded at once, so that a log the fold cannot read
    fails before anything is written. ``close`` ends it wherever it is."""

    def __init__(self, engine: Engine, until: int, namespaces: Sequence[str] | None,
                 progress: Progress, parts: int) -> None:
        self.engine, self.until, self.namespaces = engine, until, namespaces
        self.progress, self.parts = progress, parts
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="replay-fold")
        self.current: SetFold | None = None
        self.pending: Future[SetFold] | None = None
        # One cut for every part: a transaction that exports its snapshot and stays open
        # until the last part has begun.
        self.anchor = engine.connect()
        try:
            self.anchor.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, "
                                     "READ ONLY"))
            self.anchor.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
            self.snapshot = str(self.anchor.execute(text("SELECT pg_export_snapshot()"))
                                .scalar_one())
            progress.phase("fold events", unit="events")
            self.current = self._fold(0)
            _noted(self.current, progress)
        except BaseException:
            self.close()
            raise

    def _fold(self, index: int) -> SetFold:
        return _fold(self.engine, self.until, self.namespaces, FoldPart(index, self.parts),
                     self.snapshot)

    def actions(self, index: str) -> Iterator[dict[str, Any]]:
        """``folded_actions`` of every part, part after part; the next part folds
        meanwhile."""
        try:
            for part in range(1, self.parts + 1):
                folded = self.current
                assert folded is not None
                if part < self.parts:
                    self.pending = self.pool.submit(self._fold, part)
                yield from folded_actions(folded, index)
                self.current = None
                folded.close()
                if self.pending is None:
                    break
                self.current, self.pending = self.pending.result(), None
                if part == self.parts - 1:
                    self.anchor.close()  # the last part has its snapshot
                _noted(self.current, self.progress)
        finally:
            self.close()

    def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            try:
                self.pending.result().close()
            except Exception:  # cancelled, or failed: nothing of it to clean up
                pass
            self.pending = None
        self.pool.shutdown(wait=True)
        if self.current is not None:
            self.current.close()
            self.current = None
        self.anchor.close()


def folded_actions(folder: SetFold, index: str) -> Iterator[dict[str, Any]]:
    """An index action into ``index`` at the fold's position for every indexed node of a
    folded log, each document rendered by PostgreSQL from the folded rows
    (``SetFold.entries``)."""
    seq = folder.position
    for ns, node_id, entry in folder.entries(index, seq):
        yield rendered_action(index, ns, node_id, seq, entry)


#: A rebuild's documents as index actions into the index named by the argument, each
#: at the rebuild's version (the index is named after the source is read: a fold runs
#: before anything is written).
StateActions = Callable[[str], Iterator[dict[str, Any]]]


def state_actions(
    stack: ExitStack,
    source: str,
    engine: Engine,
    until: int,
    namespaces: Sequence[str] | None,
    progress: Progress,
) -> StateActions:
    """The index actions of every indexed node as of ``until``, at version ``until``:
    from the log (folded now, before anything is written) or from a snapshot (opened
    lazily, when the caller starts reading); either way each document rendered by
    PostgreSQL (``contract.index_entry_sql``), sent as it came."""
    if source == "events":
        parts = fold_parts(engine)
        if parts > 1:
            split = PartsFold(engine, until, namespaces, progress, parts)
            stack.callback(split.close)
            return split.actions
        folder = stack.enter_context(fold_log(engine, until, namespaces, progress))
        return lambda index: folded_actions(folder, index)
    return lambda index: snapshot_actions(engine, namespaces, index, until)


def state_count(
    source: str,
    engine: Engine,
    until: int,
    namespaces: Sequence[str] | None,
    progress: Progress,
) -> int:
    """How many documents ``state_actions`` would give (a dry run): from the log, the
    fold's own count in PostgreSQL, every live node but the roots (nothing streamed);
    from a snapshot, by reading it."""
    if source != "events":
        return sum(1 for _ in snapshot_actions(engine, namespaces, "dry-run", until))
    with fold_log(engine, until, namespaces, progress) as folder:
        return sum(n - 1 for n in folder.counts.values() if n > 0)  # each has its root


def snapshot_actions(
    engine: Engine, namespaces: Sequence[str] | None, index: str, seq: int
) -> Iterator[dict[str, Any]]:
    """An index action into ``index`` at version ``seq`` for every indexed node in one
    REPEATABLE READ snapshot of ``nodes`` (reindex's source), each document rendered by
    PostgreSQL. The caller takes its bound BEFORE iterating (the snapshot opens here)."""
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        # Idle between fetches while Elasticsearch loads a chunk: not a hung client.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        for ns in owned_namespaces(conn):
            if namespaces is not None and ns not in namespaces:
                continue
            for node_id, entry in walk_entries(conn, ns, index, seq):
                yield rendered_action(index, ns, node_id, seq, entry)
