"""pathkeeper_merge_metadata: a node's metadata updated key by key

Revision ID: 0016_merge_metadata_function
Revises: 0015_shard_fence
Create Date: 2026-11-26 13:10:00

Installs the functions as the files of ``coordinator/sql`` say
(``coordinator.sql.functions.install``), which adds ``pathkeeper_merge_metadata``
(``fn_merge_metadata.sql``: lock the node, merge, write through
``pathkeeper_set_metadata``). Every other function's body is unchanged.

Downgrade: drops it.
"""

from __future__ import annotations

from alembic import op

from coordinator.sql.functions import install

revision = "0016_merge_metadata_function"
down_revision = "0015_shard_fence"
branch_labels = None
depends_on = None

#: ``coordinator.sql.functions.digest()`` of the files this revision was written for
#: (see that module: a later change of a file needs a later revision naming the new one).
FUNCTIONS_DIGEST = "9a70054df50f7166"


def upgrade() -> None:
    install(op.execute)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION pathkeeper_merge_metadata(text, text, text[], uuid, jsonb, bigint)"
    )
