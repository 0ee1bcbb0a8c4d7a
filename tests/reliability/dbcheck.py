"""Checks on what PostgreSQL holds, by SQL: tree validity, table rows, the folded log."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from coordinator import Coordinator, Event
from coordinator.results import block_end
from indexer import setfold
from indexer.log_scan import current_bound

from .fold_check import Fold

Row = tuple[str | None, str, str, int, str | None, dict[str, Any]]


def table_rows(engine: Engine, ns: str) -> dict[str, Row]:
    """The ``nodes`` rows of a namespace, as the fold's ``FNode.row()`` gives them."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, parent_id, name, kind, version, content, metadata FROM nodes "
                "WHERE namespace = :ns"
            ),
            {"ns": ns},
        ).all()
    return {
        str(r.id): (
            str(r.parent_id) if r.parent_id is not None else None,
            r.name, r.kind, int(r.version), r.content, dict(r.metadata or {}),
        )
        for r in rows
    }


def counts(engine: Engine, ns: str) -> tuple[int, int]:
    """(nodes in the namespace, events in the namespace): a failed call changes neither."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM nodes WHERE namespace = :ns), "
                "(SELECT count(*) FROM events WHERE namespace = :ns)"
            ),
            {"ns": ns},
        ).one()
    return int(row[0]), int(row[1])


def tree_violations(engine: Engine, ns: str) -> list[str]:
    """Everything wrong with the shape of the stored tree (empty when it is valid):
    nodes the root does not reach (orphans or cycles), duplicate sibling names,
    children of files, more or fewer than one root."""
    problems: list[str] = []
    with engine.connect() as conn:
        roots = conn.execute(
            text("SELECT count(*) FROM nodes WHERE namespace = :ns AND parent_id IS NULL"),
            {"ns": ns},
        ).scalar_one()
        if roots != 1:
            problems.append(f"{roots} roots")
        total, reached = conn.execute(
            text(
                """
                WITH RECURSIVE down(id) AS (
                    SELECT id FROM nodes WHERE namespace = :ns AND parent_id IS NULL
                  UNION
                    SELECT n.id FROM down d JOIN nodes n
                      ON n.namespace = :ns AND n.parent_id = d.id
                )
                SELECT (SELECT count(*) FROM nodes WHERE namespace = :ns),
                       (SELECT count(*) FROM down)
                """
            ),
            {"ns": ns},
        ).one()
        if total != reached:
            problems.append(f"{total - reached} nodes do not reach the root (cycle or orphan)")
        dups = conn.execute(
            text(
                "SELECT parent_id, name, count(*) FROM nodes WHERE namespace = :ns "
                "GROUP BY parent_id, name HAVING count(*) > 1"
            ),
            {"ns": ns},
        ).all()
        problems += [f"duplicate name {d.name!r} under {d.parent_id}" for d in dups]
        under_files = conn.execute(
            text(
                "SELECT count(*) FROM nodes c JOIN nodes p "
                "ON p.namespace = c.namespace AND p.id = c.parent_id "
                "WHERE c.namespace = :ns AND p.kind <> 'dir'"
            ),
            {"ns": ns},
        ).scalar_one()
        if under_files:
            problems.append(f"{under_files} nodes under files")
    return problems


def fold_log(
    coord: Coordinator, namespaces: list[str] | None = None, strict_paths: bool = True
) -> tuple[Fold, list[Event]]:
    """Fold every event readable now, read through ``read_events`` as a consumer would;
    returns the fold and the events."""
    fold = Fold(strict_paths)
    seen: list[Event] = []
    cursor: int | None = None
    while True:
        events, nxt = coord.read_events(cursor, limit=5000, namespaces=namespaces, wait=30.0)
        fold.apply_all(events)
        seen += events
        if not events and nxt == cursor:
            return fold, seen
        cursor = nxt


def setfold_rows(engine: Engine, ns: str) -> dict[str, Row]:
    """The table as ``indexer.setfold`` (replay's and verify's fold, in PostgreSQL)
    rebuilds it from the whole committed log, without snapshots."""
    with setfold.fold(engine, until=current_bound(engine), namespaces=[ns],
                      use_snapshots=False) as got:
        if ns not in got.namespaces():
            return {}
        return {n.id: (n.parent_id, n.name, n.kind, n.version, n.content, dict(n.metadata))
                for n in got.trees[ns].nodes_by_id()}


def set_fold_violations(engine: Engine, events: list[Event], ns: str,
                        table: dict[str, Row], samples: int = 12) -> list[str]:
    """``indexer.setfold`` (replay's and verify's fold, in PostgreSQL) against this
    suite's own fold (``fold_check``) of the same prefix of the log, at a sample of the
    transaction boundaries of ``events``, and against ``nodes`` at the end."""
    out: list[str] = []
    ends = sorted({block_end(e.position) for e in events})
    for until in [*ends[:: max(1, len(ends) // samples)], ends[-1]]:
        ref = Fold(strict_paths=False)
        ref.apply_all([e for e in events if e.position <= until])
        want = ref.trees[ns].rows_with_paths() if ns in ref.trees else {}
        with setfold.fold(engine, until=until, namespaces=[ns], use_snapshots=False) as got:
            have = {n.id: (n.parent_id, n.name, n.kind, n.version, n.content,
                           dict(n.metadata), n.path) for n in got.trees[ns].nodes_by_id()}
            if got.anomalies.count:
                out.append(f"setfold as of {until}: anomalies {got.anomalies.first[:3]}")
        if have != want:
            out.append(f"setfold as of {until} differs from fold_check of the same prefix")
    if {k: v[:6] for k, v in have.items()} != table:
        out.append("setfold of the whole log differs from the nodes table")
    return out
