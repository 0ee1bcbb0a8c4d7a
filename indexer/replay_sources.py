"""Where a rebuild's documents come from: the event log folded as of a position
(replay, ``indexer.setfold``) or one REPEATABLE READ snapshot of the live ``nodes``
rows (reindex)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any

from sqlalchemy import Engine, text

from coordinator import Node

from . import setfold
from .contract import index_action, is_indexed, rendered_action
from .errors import ReplayError
from .live_nodes import owned_namespaces, walk_entries
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
    lazily, when the caller starts reading; its documents rendered by PostgreSQL)."""
    if source == "events":
        folder = stack.enter_context(fold_log(engine, until, namespaces, progress))
        return lambda index: (index_action(index, n, until) for n in folded_nodes(folder))
    return lambda index: snapshot_actions(engine, namespaces, index, until)


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
