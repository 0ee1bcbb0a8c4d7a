"""The migrated directory database equals ``coordinator/sql/directory_schema.sql``
(tables, constraints, indexes, functions and the placement trigger), and its history is
its own: a shard's version table is never written by it."""

from __future__ import annotations

import itertools

import psycopg
from test_schema_files import catalog, differences

from coordinator.migrate import DIRECTORY, head_revision, upgrade_directory
from coordinator.sql import schema
from pathkeeper.local.postgres import LocalPostgres

_ids = itertools.count()

_TRIGGERS = """
    SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE NOT t.tgisinternal
"""


def _triggers(url: str) -> set[tuple[str, ...]]:
    with psycopg.connect(url) as conn:
        return {tuple(row) for row in conn.execute(_TRIGGERS.encode())}


def test_the_migrated_directory_equals_its_schema_file(pg_cluster: LocalPostgres) -> None:
    migrated = pg_cluster.create_database(f"pk_directory_migrated_{next(_ids)}")
    upgrade_directory(migrated)
    from_file = pg_cluster.create_database(f"pk_directory_file_{next(_ids)}")
    with psycopg.connect(from_file, autocommit=True) as conn:
        conn.execute(schema("directory").encode())
    assert differences(catalog(migrated), catalog(from_file)) == []
    assert _triggers(migrated) == _triggers(from_file) != set()
    tables = {row[0] for row in catalog(migrated)["columns"]}
    assert {"public.shards", "public.placements", "public.moves", "public.api_keys"} == tables
    with psycopg.connect(migrated) as conn:
        version = conn.execute(b"SELECT version_num FROM directory_version").fetchone()
        shard_history = conn.execute(b"SELECT to_regclass('alembic_version')").fetchone()
    assert version == (head_revision(DIRECTORY),)
    assert shard_history == (None,)


def test_the_moves_table_has_the_columns_the_mover_writes(pg_cluster: LocalPostgres) -> None:
    """docs/sharding.md, section 1: the mover is written against these columns."""
    url = pg_cluster.create_database(f"pk_directory_moves_{next(_ids)}")
    upgrade_directory(url)
    with psycopg.connect(url) as conn:
        columns = [row[0] for row in conn.execute(
            b"SELECT column_name FROM information_schema.columns "
            b"WHERE table_name = 'moves' ORDER BY ordinal_position")]
    assert columns == ["namespace", "source", "target", "step", "source_last",
                       "flip_position", "started_at", "updated_at"]
