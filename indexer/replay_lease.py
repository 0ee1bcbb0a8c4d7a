"""The replay lease: one rebuild (replay or reindex) of an alias at a time."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from .errors import ReplayError

#: Classid of the replay lease: ``pg_try_advisory_lock(LEASE_CLASS, hashtext(alias))``.
LEASE_CLASS = 0x5245504C  # "REPL"


class ReplayBusy(ReplayError):
    """Another replay or reindex of the same alias holds the lease."""


class ReplayLease:
    """A session-level advisory lock on a hash of the alias, on a dedicated connection.

    Held for the whole rebuild; released on exit, or by the server when the
    process dies (the session ends), so a killed replay never blocks the next.
    """

    def __init__(self, engine: Engine, alias: str) -> None:
        self.engine = engine
        self.alias = alias
        self._conn: Connection | None = None

    def __enter__(self) -> ReplayLease:
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        got = conn.execute(
            text("SELECT pg_try_advisory_lock(:cls, hashtext(:alias))"),
            {"cls": LEASE_CLASS, "alias": self.alias},
        ).scalar_one()
        if not got:
            pid = conn.execute(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND classid = CAST(:cls AS oid) "
                    "AND objid = CAST(CAST(hashtext(:alias) AS bigint) & 4294967295 AS oid) "
                    "LIMIT 1"
                ),
                {"cls": LEASE_CLASS, "alias": self.alias},
            ).scalar()
            conn.close()
            raise ReplayBusy(
                f"another replay or reindex of alias {self.alias!r} is running "
                f"(PostgreSQL backend pid {pid}); wait for it to finish or stop it"
            )
        self._conn = conn
        return self

    def __exit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute(
                text("SELECT pg_advisory_unlock(:cls, hashtext(:alias))"),
                {"cls": LEASE_CLASS, "alias": self.alias},
            )
        finally:
            # Never hand a session that might still hold the lock back to the pool.
            conn.invalidate()
            conn.close()
