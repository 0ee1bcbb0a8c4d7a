"""The schema, as SQLAlchemy models. Alembic migrations create it; a test checks they agree.

Every table is keyed by namespace (primary, unique and foreign keys include it) so
that the schema can be distributed by namespace (e.g. Citus) without a redesign.
The event position is unique by construction (a sequence), not by an index, for
the same reason.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Sequence,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .results import POSITION_BLOCK

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Each transaction takes one block of positions (POSITION_BLOCK) with one nextval(); its
# events use consecutive positions inside the block, so a group of events is one
# contiguous range that a reader takes whole (see coordinator/event_reader.py).

# A valid non-root name, as the database checks it (paths.validate_name is the
# friendly front door; this makes invalid trees impossible to store). NFC since
# migration 0011; coordinator/sql/schema.sql has the schema as it stands.
VALID_NAME_SQL = (
    "((parent_id IS NULL AND name = '') OR (parent_id IS NOT NULL AND name <> '' "
    "AND name NOT IN ('.', '..') AND strpos(name, '/') = 0 "
    "AND octet_length(name) <= 255 AND name !~ '[\\x01-\\x1f\\x7f-\\x9f]')) "
    "AND name IS NFC NORMALIZED"
)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


position_seq = Sequence(
    "event_position_seq", metadata=Base.metadata, increment=POSITION_BLOCK, start=POSITION_BLOCK,
    cache=1,
)


class Namespace(Base):
    __tablename__ = "namespaces"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    root_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class NodeRow(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        # The foreign keys below reference this; it is unique because id is.
        UniqueConstraint("namespace", "id", "kind", name="uq_nodes_namespace_id_kind"),
        # Sibling names are unique. The root's parent is NULL, so it is exempt.
        UniqueConstraint("namespace", "parent_id", "name", name="uq_nodes_namespace_parent_name"),
        # The parent must exist, in the same namespace, and be a directory:
        # parent_kind is always 'dir', so the key only matches directories.
        ForeignKeyConstraint(
            ["namespace", "parent_id", "parent_kind"],
            ["nodes.namespace", "nodes.id", "nodes.kind"],
            name="fk_nodes_parent_is_dir",
        ),
        ForeignKeyConstraint(
            ["namespace"], ["namespaces.name"], ondelete="CASCADE", name="fk_nodes_namespace"
        ),
        CheckConstraint("kind IN ('file', 'dir')", name="kind"),
        CheckConstraint("parent_kind = 'dir'", name="parent_kind"),
        CheckConstraint("kind = 'file' OR content IS NULL", name="content_only_files"),
        CheckConstraint("parent_id IS NOT NULL OR kind = 'dir'", name="root_is_dir"),
        CheckConstraint("version > 0", name="version"),
        CheckConstraint(VALID_NAME_SQL, name="name_valid"),
        # One root per namespace.
        Index(
            "uq_nodes_one_root",
            "namespace",
            unique=True,
            postgresql_where=text("parent_id IS NULL"),
        ),
    )

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    parent_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    parent_kind: Mapped[str] = mapped_column(String(4), server_default="dir")
    name: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(4))
    content: Mapped[str | None] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=text("'{}'::jsonb")
    )
    version: Mapped[int] = mapped_column(BigInteger, server_default="1")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class EventRow(Base):
    """The event log and the outbox: appended in the same transaction as the change."""

    __tablename__ = "events"
    __table_args__ = (
        # Readers scan by position across namespaces; uniqueness comes from the sequence.
        Index("ix_events_position", "position"),
    )

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    node_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    type: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # The writing transaction: for diagnosis, not for ordering (xids do not survive a
    # dump and restore).
    xid: Mapped[int] = mapped_column(
        BigInteger, server_default=text("(pg_current_xact_id()::text)::bigint")
    )
    committed_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.clock_timestamp()
    )


class Checkpoint(Base):
    """A consumer's position in the event log (the indexer's, per partition)."""

    __tablename__ = "checkpoints"

    consumer: Mapped[str] = mapped_column(String(200), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger, server_default="0")
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class DeadLetter(Base):
    """An event the indexer could never apply (e.g. a document Elasticsearch rejects)."""

    __tablename__ = "dead_letters"

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    consumer: Mapped[str] = mapped_column(String(200))
    position: Mapped[int] = mapped_column(BigInteger)
    node_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    error: Mapped[str] = mapped_column(Text)
    document: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    retried_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ApiKey(Base):
    """An HTTP API key; only a hash of the secret is stored."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    key_hash: Mapped[str] = mapped_column(Text, unique=True)
    namespaces: Mapped[list[str]] = mapped_column(ARRAY(Text))
    scope: Mapped[str] = mapped_column(String(8))
    label: Mapped[str] = mapped_column(Text, server_default="")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint("scope IN ('read', 'write', 'admin')", name="scope"),)


class IdempotencyKey(Base):
    """The stored result of a mutation sent with an Idempotency-Key, written in the
    same transaction as the change."""

    __tablename__ = "idempotency_keys"

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(Text)
    status: Mapped[int] = mapped_column(Integer)
    response: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_idempotency_keys_expires_at", "expires_at"),)


class LogSnapshot(Base):
    """The folded state of every namespace as of ``position`` (``indexer.retention``):
    replay and verify start from the newest one and fold only the events after it, and
    compaction may delete the events it covers."""

    __tablename__ = "log_snapshots"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    position: Mapped[int] = mapped_column(BigInteger)
    taken_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    namespaces: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(BigInteger)
    #: Inconsistencies the fold met (``indexer.setfold``); a snapshot keeps what it folded.
    anomalies: Mapped[int] = mapped_column(Integer, server_default="0")
    #: None: every namespace; a name: that namespace alone (written by a move).
    namespace: Mapped[str | None] = mapped_column(String(128))

    __table_args__ = (Index("ix_log_snapshots_position", "position"),)


class LogSnapshotNode(Base):
    """One live node of a snapshot, as ``nodes`` holds it (paths are computed)."""

    __tablename__ = "log_snapshot_nodes"
    __table_args__ = (
        ForeignKeyConstraint(
            ["snapshot_id"], ["log_snapshots.id"], ondelete="CASCADE",
            name="fk_log_snapshot_nodes_snapshot",
        ),
        # The fold looks up each snapshot's roots.
        Index(
            "ix_log_snapshot_nodes_roots", "snapshot_id", "namespace",
            postgresql_where=text("parent_id IS NULL"),
        ),
    )

    snapshot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    parent_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    name: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(4))
    content: Mapped[str | None] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB)
    version: Mapped[int] = mapped_column(BigInteger)


class LogHorizon(Base):
    """One row: events at or below ``position`` were deleted by compaction. Readers whose
    cursor is below it get ``CursorExpired``; folds as of a position below it get
    ``LogCompacted``. Absent: the log is whole."""

    __tablename__ = "log_horizon"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    position: Mapped[int] = mapped_column(BigInteger)
    snapshot_id: Mapped[int] = mapped_column(BigInteger)
    compacted_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class NamespacePlacement(Base):
    """Whether this server owns a namespace now (docs/sharding.md); no row: active."""

    __tablename__ = "namespace_placement"

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    state: Mapped[str] = mapped_column(String(8))
    log_from: Mapped[int] = mapped_column(BigInteger, server_default="0")
    frozen_at: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )

    __table_args__ = (
        CheckConstraint("state IN ('incoming', 'active', 'frozen', 'gone')", name="state"),
    )
