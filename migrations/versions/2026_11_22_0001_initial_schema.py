"""initial schema: namespaces, nodes (adjacency list), events (log + outbox), checkpoints

Revision ID: 0001
Revises:
Create Date: 2026-11-22 11:20:24.594905
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One value per writing transaction: the base of its block of event positions
    # (see coordinator/eventlog.py). CACHE 1 so values are handed out in order.
    op.execute("CREATE SEQUENCE event_position_seq INCREMENT BY 65536 START WITH 65536 CACHE 1")
    op.create_table(
        "checkpoints",
        sa.Column("consumer", sa.String(length=200), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("consumer", "partition", name=op.f("pk_checkpoints")),
    )
    op.create_table(
        "events",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.UUID(), nullable=True),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "xid",
            sa.BigInteger(),
            server_default=sa.text("(pg_current_xact_id()::text)::bigint"),
            nullable=False,
        ),
        sa.Column(
            "committed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("namespace", "position", name=op.f("pk_events")),
    )
    op.create_index("ix_events_position", "events", ["position"], unique=False)
    op.create_table(
        "namespaces",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("root_id", sa.UUID(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_namespaces")),
    )
    op.create_table(
        "nodes",
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("parent_id", sa.UUID(), nullable=True),
        sa.Column("parent_kind", sa.String(length=4), server_default="dir", nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=4), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "(parent_id IS NULL AND name = '') OR (parent_id IS NOT NULL AND name <> '' AND name NOT IN ('.', '..') AND strpos(name, '/') = 0 AND octet_length(name) <= 255 AND name !~ '[\\x01-\\x1f\\x7f-\\x9f]')",
            name=op.f("ck_nodes_name_valid"),
        ),
        sa.CheckConstraint(
            "kind = 'file' OR content IS NULL", name=op.f("ck_nodes_content_only_files")
        ),
        sa.CheckConstraint("kind IN ('file', 'dir')", name=op.f("ck_nodes_kind")),
        sa.CheckConstraint(
            "parent_id IS NOT NULL OR kind = 'dir'", name=op.f("ck_nodes_root_is_dir")
        ),
        sa.CheckConstraint("parent_kind = 'dir'", name=op.f("ck_nodes_parent_kind")),
        sa.CheckConstraint("version > 0", name=op.f("ck_nodes_version")),
        sa.ForeignKeyConstraint(
            ["namespace", "parent_id", "parent_kind"],
            ["nodes.namespace", "nodes.id", "nodes.kind"],
            name="fk_nodes_parent_is_dir",
        ),
        sa.ForeignKeyConstraint(
            ["namespace"], ["namespaces.name"], name="fk_nodes_namespace", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("namespace", "id", name=op.f("pk_nodes")),
        sa.UniqueConstraint("namespace", "id", "kind", name="uq_nodes_namespace_id_kind"),
        sa.UniqueConstraint(
            "namespace", "parent_id", "name", name="uq_nodes_namespace_parent_name"
        ),
    )
    op.create_index(
        "uq_nodes_one_root",
        "nodes",
        ["namespace"],
        unique=True,
        postgresql_where=sa.text("parent_id IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_nodes_one_root", table_name="nodes", postgresql_where=sa.text("parent_id IS NULL")
    )
    op.drop_table("nodes")
    op.drop_table("namespaces")
    op.drop_index("ix_events_position", table_name="events")
    op.drop_table("events")
    op.drop_table("checkpoints")
    op.execute("DROP SEQUENCE event_position_seq")
