"""nodes.namespace is never estimated unique: its n_distinct is a thousandth of the rows

Revision ID: 0018_namespace_distinct_estimate
Revises: 0017_update_by_id_index
Create Date: 2026-11-27 03:20:00

Statistics taken while each namespace held its root alone (a service creates its
tenants, autovacuum analyzes the table past 50 new rows) sample each namespace once, so
ANALYZE took the column for unique: one row per namespace. PostgreSQL's own foreign-key
check of a new node (its parent by namespace, id and kind) then read the parent through
the (namespace, parent_id, name) index, filtering on the id: the whole namespace per new
node, so the first import into such a tenant grew with the square of its size (20,000
nodes: 64 s instead of 0.82 s, ``bench/bench_import.py --fresh-tenants 60``), and a
directory move right after a burst of creates read the namespace at several probes.

A namespace is a tree of many nodes, so the column's number of distinct values is set
to a thousandth of the table's rows (``n_distinct = -0.001``, namespaces of a thousand
nodes on average) for ANALYZE to store instead of its own estimate. A namespace among
the statistics' most common values is still estimated by its own frequency; one that is
not is guessed too large rather than too small, which costs an index scan nothing. A
table that has statistics is analyzed here, so the estimate holds from now on, not from
autovacuum's next analyze; one never analyzed with rows (a new database) is left to
autovacuum, as before.

Downgrade: the column's estimate is ANALYZE's own again.
"""

from __future__ import annotations

from alembic import op

revision = "0018_namespace_distinct_estimate"
down_revision = "0017_update_by_id_index"
branch_labels = None
depends_on = None


# ANALYZE nodes if its statistics were taken with rows: they then hold the estimate this
# revision replaces.
_ANALYZE_IF_ANALYZED = """
DO $$
BEGIN
    IF (SELECT reltuples FROM pg_class WHERE oid = CAST('nodes' AS regclass)) > 0 THEN
        ANALYZE nodes;
    END IF;
END $$
"""


def upgrade() -> None:
    op.execute("ALTER TABLE nodes ALTER COLUMN namespace SET (n_distinct = -0.001)")
    op.execute(_ANALYZE_IF_ANALYZED)


def downgrade() -> None:
    op.execute("ALTER TABLE nodes ALTER COLUMN namespace RESET (n_distinct)")
    op.execute(_ANALYZE_IF_ANALYZED)
