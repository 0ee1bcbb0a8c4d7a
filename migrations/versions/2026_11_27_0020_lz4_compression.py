"""Files' contents and events' payloads are compressed with lz4, where the server has it

Revision ID: 0020_lz4_compression
Revises: 0019_walks_by_row_namespace
Create Date: 2026-11-27 18:40:00

A value past about 2 KB is compressed as it is stored (TOAST), by default with pglz. A
write of a file stores its content twice, in the node's row and in its event's payload,
and pglz compresses at a fraction of lz4's speed for about the same size: a lone write
of 8 MiB of source text took 387-390 ms with pglz, 143-158 ms with lz4 (PostgreSQL's own
update of the row with its event: 338-344 ms, 99-107 ms); reading it in the server,
26-27 ms, 18 ms; stored, 2.9 MB, 3.3 MB (``bench/README.md``, "Part 4").

``nodes.content``, ``events.payload`` and ``log_snapshot_nodes.content`` are set to lz4
when the server was built with it (``default_toast_compression`` lists it: Debian's and
the official images' builds are). A value stored before keeps its compression; both are
read alike. A server without lz4 keeps pglz: nothing else depends on it. An import stages
its lines in a temporary table first and PostgreSQL keeps a value compressed as it was,
so the import compresses its stage as ``nodes.content`` says (``coordinator.importer``).

Downgrade: the columns' compression is the server's default again.
"""

from __future__ import annotations

from alembic import op

revision = "0020_lz4_compression"
down_revision = "0019_walks_by_row_namespace"
branch_labels = None
depends_on = None

#: The columns that hold a file's content, whole: a row's, an event's (a create's and a
#: write's payload carry it), a compaction snapshot's.
COLUMNS = (("nodes", "content"), ("events", "payload"), ("log_snapshot_nodes", "content"))


def _set(method: str) -> str:
    return "\n".join(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method};"
                     for table, column in COLUMNS)


def upgrade() -> None:
    # A catalog change only (no rewrite): values stored from now on use it.
    op.execute(f"""
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        {_set("lz4")}
    END IF;
END $$
""")


def downgrade() -> None:
    op.execute(_set("DEFAULT"))
