"""the event log's position lock and the scheduled snapshot's lock as table locks

Revision ID: 0010_position_lock_tables
Revises: 0009_write_functions
Create Date: 2026-11-26 06:45:00

Both locks were advisory locks, and any role that can connect can take an advisory lock
of any key: a role with no privilege on our tables held back the log's readers (shared),
failed every write (exclusive) or made every scheduled snapshot skip. They are now locks
on two empty tables of a schema of their own, ``pathkeeper_locks``, on which PUBLIC has
no privilege: a role without USAGE on the schema cannot name the tables, so it can take
no lock on them in any mode (not even the ones PostgreSQL takes while parsing, before
it checks privileges, e.g. for ``PREPARE ... SELECT ... FOR UPDATE``). The argument is
in ``coordinator/event_reader.py`` (position lock) and ``indexer/retention.py`` (snapshot).

``pathkeeper_locks.take_position_lock()``: ``LOCK TABLE position_lock IN ROW SHARE
MODE`` (writers never conflict with one another: ROW SHARE conflicts only with
EXCLUSIVE and ACCESS EXCLUSIVE), a function so that a writer can take it inside its one
claiming statement. It runs with the caller's privileges: only a role that may write
our tables (the owner, or one granted USAGE on the schema and UPDATE on the table) can
take it.

Upgrading: writers of the code before this revision take the advisory lock, which readers
of this revision no longer look at (and the other way round). Stop every writer and log
reader of the older code (services, workers) before starting this code's readers; an
older writer still in flight could otherwise have its block passed by a newer reader.
"""

from __future__ import annotations

from alembic import op

revision = "0010_position_lock_tables"
down_revision = "0009_write_functions"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE SCHEMA pathkeeper_locks;
REVOKE ALL ON SCHEMA pathkeeper_locks FROM PUBLIC;
CREATE TABLE pathkeeper_locks.position_lock ();
CREATE TABLE pathkeeper_locks.snapshot_lock ();
COMMENT ON TABLE pathkeeper_locks.position_lock IS
    'Never holds rows. Writers of the event log hold ROW SHARE on it from before they take '
    'a block of positions until they end; log readers wait for its holders.';
COMMENT ON TABLE pathkeeper_locks.snapshot_lock IS
    'Never holds rows. The scheduled snapshot holds EXCLUSIVE on it while it runs.';
CREATE FUNCTION pathkeeper_locks.take_position_lock() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    LOCK TABLE pathkeeper_locks.position_lock IN ROW SHARE MODE;
    RETURN true;
END
$fn$;
REVOKE ALL ON FUNCTION pathkeeper_locks.take_position_lock() FROM PUBLIC;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP SCHEMA pathkeeper_locks CASCADE")
