"""the shard fence: namespace_placement, and snapshots of one namespace

Revision ID: 0014_namespace_placement
Revises: 0013_lock_by_id_index
Create Date: 2026-11-26 13:05:00

A namespace can be moved from one database server to another (docs/sharding.md). Each
server says, per namespace, whether it owns it now: ``namespace_placement`` (no row:
``active``, the server's state before any move). ``incoming``: rows being copied here,
not yet this server's; ``frozen``: being moved away, readable, not writable;
``gone``: moved away (the row stays as the fence). ``log_from``: on the server a
namespace moved to, its events at or below this position were written (and indexed)
elsewhere; ``frozen_at``: on the server it left, every position it got there is at or
below this.

``log_snapshots.namespace``: NULL for a snapshot of every namespace (as before); a
namespace's name for the snapshot a move writes of that namespace alone.
"""

from __future__ import annotations

from alembic import op

revision = "0014_namespace_placement"
down_revision = "0013_lock_by_id_index"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE namespace_placement (
    namespace varchar(128) NOT NULL,
    state varchar(8) NOT NULL,
    log_from bigint DEFAULT '0' NOT NULL,
    frozen_at bigint,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_namespace_placement PRIMARY KEY (namespace),
    CONSTRAINT ck_namespace_placement_state
        CHECK (state IN ('incoming', 'active', 'frozen', 'gone'))
);
ALTER TABLE log_snapshots ADD COLUMN namespace varchar(128);
"""

DOWNGRADE = """
ALTER TABLE log_snapshots DROP COLUMN namespace;
DROP TABLE namespace_placement;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
