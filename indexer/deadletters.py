"""Documents Elasticsearch rejected for good: recorded, listed, retried.

A rejected document does not stop the worker (the rest of the batch and the
checkpoint go on); it is written to ``dead_letters`` with the error, logged at
ERROR and counted in ``pathkeeper_indexer_dead_letters_total``. One larger than the
search server takes in a request (413) is logged at WARNING (``document_too_large``)
and counted in ``pathkeeper_indexer_documents_too_large_total`` too; its letter holds
no copy of the document. Rebuilds record the ones they leave out (``record(once=True)``).
A retry reads the node's state now and writes it at the current safe position of
the log (so it can only be newer than anything indexed before), or deletes its
document if the node is gone.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from coordinator.event_reader import wait_for_bound

from . import metrics
from .bulk import Rejected, send
from .contract import delete_action, index_action, is_indexed
from .live_nodes import fetch_nodes
from .logs import log
from .search_engine import SearchEngine

logger = logging.getLogger("pathkeeper.indexer")


@dataclass(frozen=True)
class DeadLetter:
    id: int
    namespace: str
    consumer: str
    position: int
    node_id: str | None
    error: str
    document: dict[str, Any] | None
    created_at: datetime
    retried_at: datetime | None


_RECORD_SQL = (
    "INSERT INTO dead_letters (namespace, consumer, position, node_id, error, document) "
    "SELECT CAST(:ns AS text), CAST(:c AS text), CAST(:pos AS bigint), "
    "CAST(:node AS uuid), CAST(:err AS text), CAST(:doc AS jsonb)"
)


def record(engine: Engine, consumer: str, rejected: Rejected, *, once: bool = False) -> None:
    """Store one rejected document; with ``once``, not if a letter of the same node is
    pending for ``consumer`` already (a rebuild meeting what the worker recorded)."""
    try:
        node_id: uuid.UUID | None = uuid.UUID(rejected.node_id)
    except ValueError:
        node_id = None
    sql = _RECORD_SQL
    if once:
        sql += (" WHERE NOT EXISTS (SELECT 1 FROM dead_letters WHERE consumer = :c "
                "AND namespace = :ns AND node_id IS NOT DISTINCT FROM CAST(:node AS uuid) "
                "AND retried_at IS NULL)")
    with engine.begin() as conn:
        conn.execute(
            text(sql),
            {
                "ns": rejected.namespace,
                "c": consumer,
                "pos": rejected.version,
                "node": node_id,
                "err": f"{rejected.status} {rejected.error}",
                "doc": json.dumps(rejected.document) if rejected.document is not None else None,
            },
        )


def reject(engine: Engine, consumer: str, rejected: Rejected) -> None:
    """The worker's answer to a document rejected for good: counted, logged, recorded."""
    metrics.DEAD_LETTERS.labels(consumer).inc()
    if rejected.too_large:
        # The search server's limit, not a broken document: a warning, and the
        # partition goes on (``indexer.bulk``: halving isolated this one).
        metrics.TOO_LARGE.labels(consumer).inc()
        log(logger, logging.WARNING, "document_too_large", namespace=rejected.namespace,
            node_id=rejected.node_id, version=rejected.version, size=rejected.size,
            error=rejected.error)
    else:
        log(logger, logging.ERROR, "document_rejected", namespace=rejected.namespace,
            node_id=rejected.node_id, version=rejected.version, status=rejected.status,
            error=rejected.error)
    record(engine, consumer, rejected)


def pending(engine: Engine, consumer: str | None = None, limit: int = 1000) -> list[DeadLetter]:
    """Dead letters not successfully retried yet, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, namespace, consumer, position, node_id, error, document, created_at, "
                "retried_at FROM dead_letters WHERE retried_at IS NULL "
                "AND (CAST(:c AS text) IS NULL OR consumer = :c) ORDER BY id LIMIT :limit"
            ),
            {"c": consumer, "limit": limit},
        ).all()
    return [
        DeadLetter(
            id=int(r.id), namespace=r.namespace, consumer=r.consumer, position=int(r.position),
            node_id=str(r.node_id) if r.node_id is not None else None, error=r.error,
            document=r.document, created_at=r.created_at, retried_at=r.retried_at,
        )
        for r in rows
    ]


def pending_errors(
    engine: Engine, consumer: str, nodes: list[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """Of ``nodes`` ((namespace, node id) pairs), those with a pending dead letter of
    ``consumer``, and the newest letter's error."""
    found: dict[tuple[str, str], str] = {}
    for start in range(0, len(nodes), 1000):
        chunk = nodes[start:start + 1000]
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT namespace, CAST(node_id AS text) AS node_id, error "
                    "FROM dead_letters WHERE retried_at IS NULL AND consumer = :c "
                    "AND CAST(node_id AS text) = ANY(CAST(:ids AS text[])) ORDER BY id"
                ),
                {"c": consumer, "ids": [node_id for _, node_id in chunk]},
            ).all()
        wanted = set(chunk)
        for r in rows:
            if (r.namespace, r.node_id) in wanted:
                found[(r.namespace, r.node_id)] = r.error
    return found


def count_pending(engine: Engine, consumer: str | None = None) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM dead_letters WHERE retried_at IS NULL "
                    "AND (CAST(:c AS text) IS NULL OR consumer = :c)"
                ),
                {"c": consumer},
            ).scalar_one()
        )


def retry(
    engine: Engine, es: SearchEngine, alias: str, consumer: str | None = None
) -> tuple[int, int]:
    """Write every pending dead letter's node again as it is now.

    Returns (fixed, still failing). A letter that fails again stays pending, with
    its error updated.
    """
    letters = pending(engine, consumer)
    if not letters:
        return 0, 0
    # Every event <= bound has committed, and the snapshot below is taken after,
    # so the state read is at least as new as any event <= bound.
    bound = wait_for_bound(engine, wait=30.0)  # BoundTimeout names the writers in flight
    fixed = failed = 0
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            for letter in letters:
                if letter.node_id is None:
                    continue
                node = fetch_nodes(conn, letter.namespace, [letter.node_id]).get(letter.node_id)
                if node is not None and is_indexed(node):
                    action = index_action(alias, node, bound)
                else:
                    action = delete_action(alias, letter.namespace, letter.node_id, bound)
                errors: list[Rejected] = []
                send(es, [action], errors.append)
                if errors:
                    failed += 1
                    conn.execute(
                        text(
                            "UPDATE dead_letters SET error = :e "
                            "WHERE namespace = :ns AND id = :id"
                        ),
                        {"e": f"{errors[0].status} {errors[0].error}", "ns": letter.namespace,
                         "id": letter.id},
                    )
                else:
                    fixed += 1
                    conn.execute(
                        text(
                            "UPDATE dead_letters SET retried_at = now() "
                            "WHERE namespace = :ns AND id = :id"
                        ),
                        {"ns": letter.namespace, "id": letter.id},
                    )
    return fixed, failed
