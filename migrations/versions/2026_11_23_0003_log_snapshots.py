"""log snapshots and compaction horizon

Revision ID: 0003_log_snapshots
Revises: 0002
Create Date: 2026-11-23 12:50:00

Stored snapshots of the folded event log (``log_snapshots``, ``log_snapshot_nodes``)
and the compaction horizon (``log_horizon``): see ``indexer.retention``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_log_snapshots"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_snapshots",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column(
            "taken_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("namespaces", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.BigInteger(), nullable=False),
        sa.Column("anomalies", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_snapshots")),
    )
    op.create_index("ix_log_snapshots_position", "log_snapshots", ["position"])
    op.create_table(
        "log_snapshot_nodes",
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("parent_id", sa.UUID(), nullable=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=4), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"], ["log_snapshots.id"], ondelete="CASCADE",
            name="fk_log_snapshot_nodes_snapshot",
        ),
        sa.PrimaryKeyConstraint("snapshot_id", "namespace", "id",
                                name=op.f("pk_log_snapshot_nodes")),
    )
    op.create_index(
        "ix_log_snapshot_nodes_roots", "log_snapshot_nodes", ["snapshot_id", "namespace"],
        postgresql_where=sa.text("parent_id IS NULL"),
    )
    op.create_table(
        "log_horizon",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "compacted_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_log_horizon_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_horizon")),
    )


def downgrade() -> None:
    op.drop_table("log_horizon")
    op.drop_index("ix_log_snapshot_nodes_roots", table_name="log_snapshot_nodes",
                  postgresql_where=sa.text("parent_id IS NULL"))
    op.drop_table("log_snapshot_nodes")
    op.drop_index("ix_log_snapshots_position", table_name="log_snapshots")
    op.drop_table("log_snapshots")
