"""Test and benchmark data: a large subtree written in one transaction, behind the
coordinator's back but exactly as it would write it (rows, ``created`` events)."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from coordinator import Coordinator
from coordinator.events import Created, encode


def bulk_subtree(
    coord: Coordinator, ns: str, parent_path: str, name: str, dirs: int, files_per_dir: int
) -> tuple[str, int]:
    """Create ``parent_path/name`` with ``dirs`` directories of ``files_per_dir`` files,
    in ONE transaction, writing the same rows and the same ``created`` events as the
    coordinator would (one block of positions, a NOTIFY). The coordinator creates
    nodes one statement at a time (~5 ms each here), far too slow for 20,000 nodes
    in a test or a benchmark's setup; the indexer only sees rows and events, which are
    identical.
    Returns (id of the new directory, number of nodes created)."""
    parent = coord.stat(ns, parent_path)
    top = str(uuid.uuid4())
    top_path = f"{parent.path.rstrip('/')}/{name}"
    rows: list[tuple[str, str, str, str, str | None, str]] = [
        (top, parent.id, name, "dir", None, top_path)
    ]
    for d in range(dirs):
        did = str(uuid.uuid4())
        dpath = f"{top_path}/d{d}"
        rows.append((did, top, f"d{d}", "dir", None, dpath))
        for f in range(files_per_dir):
            rows.append((str(uuid.uuid4()), did, f"f{f}", "file", f"body {d}/{f}", f"{dpath}/f{f}"))
    payloads = [
        json.dumps(encode(Created(id=i, parent_id=p, name=n, kind=k, path=path, content=c,
                                  metadata={}, version=1))[2])
        for i, p, n, k, c, path in rows
    ]
    with coord.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO nodes (namespace, id, parent_id, name, kind, content) "
                "SELECT :ns, i, p, n, k, c FROM unnest(CAST(:ids AS uuid[]), "
                "CAST(:parents AS uuid[]), CAST(:names AS text[]), CAST(:kinds AS text[]), "
                "CAST(:contents AS text[])) AS t(i, p, n, k, c)"
            ),
            {"ns": ns, "ids": [r[0] for r in rows], "parents": [r[1] for r in rows],
             "names": [r[2] for r in rows], "kinds": [r[3] for r in rows],
             "contents": [r[4] for r in rows]},
        )
        # As coordinator.event_appender.EventAppender.flush does: the block is taken by the
        # last statement, after the transaction has its id (readers wait on it).
        conn.execute(text("SELECT pg_current_xact_id()"))
        base = int(conn.execute(text("SELECT nextval('event_position_seq')")).scalar_one())
        conn.execute(
            text(
                "INSERT INTO events (namespace, position, node_id, type, payload) "
                "SELECT :ns, :base + o - 1, i, 'created', CAST(p AS jsonb) "
                "FROM unnest(CAST(:ids AS uuid[]), CAST(:payloads AS text[])) "
                "WITH ORDINALITY AS t(i, p, o)"
            ),
            {"ns": ns, "base": base, "ids": [r[0] for r in rows], "payloads": payloads},
        )
        conn.execute(text("SELECT pg_notify('pathkeeper_events', '')"))
    return top, len(rows)
