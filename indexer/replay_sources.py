"""Where a rebuild's documents come from: the event log folded as of a position
(replay, ``indexer.setfold``) or one REPEATABLE READ snapshot of the live ``nodes``
rows (reindex)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack

from sqlalchemy import Engine, text

from coordinator import Node

from . import setfold
from .contract import is_indexed
from .errors import ReplayError
from .live_nodes import owned_namespaces, walk_nodes
from .progress import Progress
from .setfold import SetFold


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
    try:
        folded = setfold.fold(engine, until=until, namespaces=namespaces)
    except setfold.LogCompacted as exc:
        raise ReplayError(str(exc)) from exc
    progress.advance(folded.events)
    if folded.base.snapshot_id is not None:
        progress.note(f"started from snapshot {folded.base.snapshot_id} "
                      f"(position {folded.base.position}) plus {folded.events} events")
    if folded.anomalies.count:
        progress.note(
            f"the log has {folded.anomalies.count} inconsistencies, first: "
            f"{folded.anomalies.first[:3]} (run `pathkeeper verify` for the full story)"
        )
    return folded


def folded_nodes(folder: SetFold) -> Iterator[Node]:
    """Every indexed node of a folded log."""
    for ns in folder.namespaces():
        for node in folder.trees[ns].nodes():
            if is_indexed(node):
                yield node


def state_nodes(
    stack: ExitStack,
    source: str,
    engine: Engine,
    until: int,
    namespaces: Sequence[str] | None,
    progress: Progress,
) -> Iterator[Node]:
    """The nodes as of ``until``: from the log (folded now, before anything is written)
    or from a snapshot (opened lazily, when the caller starts reading)."""
    if source == "events":
        folder = stack.enter_context(fold_log(engine, until, namespaces, progress))
        return folded_nodes(folder)
    return snapshot_nodes(engine, namespaces)


def snapshot_nodes(engine: Engine, namespaces: Sequence[str] | None) -> Iterator[Node]:
    """Every indexed node in one REPEATABLE READ snapshot of ``nodes`` (reindex's
    source). The caller takes its bound BEFORE iterating (the snapshot opens here)."""
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        # Idle between fetches while Elasticsearch loads a chunk: not a hung client.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        for ns in owned_namespaces(conn):
            if namespaces is not None and ns not in namespaces:
                continue
            for node in walk_nodes(conn, ns):
                if is_indexed(node):
                    yield node
