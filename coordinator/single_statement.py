"""A rename that is a whole transaction, sent as one statement with its COMMIT.

``Coordinator.execute`` of a lone ``Rename`` (the most frequent write) does not go
through a ``UnitOfWork``: one statement calls ``pathkeeper_rename`` (the rule, in the
server), takes the transaction's block of positions and writes the ``moved`` event,
and it goes out with BEGIN, COMMIT and the wake-up in one pipeline: one round trip and
no Python between the steps. What a ``UnitOfWork`` keeps in order holds here by the
statement's shape: the function (every lock and write) runs first, as the materialized
``r``; the claim (transaction id, position lock, ``nextval``) is evaluated per row of
``r``, so after it; the event is written into that block. The payload is built in SQL
from ``events.Moved`` (``payload_sql`` checks its keys), the same one ``TreeTx.rename``
appends inside a group.
"""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from .db import Driver, driver_sql
from .eventlog import CLAIM_SQL, NOTIFY_CHANNEL, Committed
from .events import Moved, payload_sql
from .notifier import NOTIFY_SQL
from .tree import RENAME_CALL, MutationResult, RenameCall

_MOVED_PAYLOAD = payload_sql(Moved, {
    "id": "CAST(r.id AS text)", "kind": "r.kind",
    "old_parent_id": "CAST(r.parent_id AS text)", "old_name": "r.old_name",
    "old_path": "r.old_path", "parent_id": "CAST(r.parent_id AS text)", "name": "r.name",
    "path": "r.path", "version": "r.version",
})

RENAME_LOGGED_SQL = driver_sql(
    f"""
    WITH r AS MATERIALIZED (SELECT * FROM {RENAME_CALL}),
    block AS (
        SELECT nextval('event_position_seq') AS base
        FROM r, LATERAL (SELECT * FROM ({CLAIM_SQL}) AS c WHERE r.changed OFFSET 0) AS claim
    ),
    written AS (
        INSERT INTO events (namespace, position, node_id, type, payload)
        SELECT :ns, block.base, r.id, '{Moved.TYPE}', {_MOVED_PAYLOAD} FROM r, block
    )
    SELECT r.*, (SELECT base FROM block) AS base FROM r
    """,
    binary=("parts",),
)
_NOTIFY = driver_sql(NOTIFY_SQL)


def rename(conn: Connection, call: RenameCall, *, notify: bool) -> MutationResult:
    """Run ``call`` as the whole transaction ``conn`` has begun, and commit it. A driver
    error is raised as ``DBAPIError`` (a refusal of the rule as the typed error): once
    sent, COMMIT may have applied, so the caller must not run it again after a lost
    connection."""
    db = Driver(conn)
    wake_up = (_NOTIFY, {"c": NOTIFY_CHANNEL, "nss": [call.ns]}) if notify else None
    params = call.params
    try:
        cur = db.send_and_commit(RENAME_LOGGED_SQL, params, then=wake_up)
    except IntegrityError as exc:
        raise call.refused(exc) from exc
    with db.errors(RENAME_LOGGED_SQL, params):
        row = cur.fetchone()
    assert row is not None
    node, event = call.result(row)
    if event is None:
        return MutationResult(node, None)
    return MutationResult(node, Committed(int(row.base)))
