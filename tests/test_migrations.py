"""Alembic migrations: up, down to nothing, up again on a fresh database; the models
agree with what the migrations build; the CLI applies them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect, text

from coordinator import Coordinator
from coordinator.db import sqlalchemy_url
from coordinator.migrate import alembic_config, downgrade, upgrade
from coordinator.models import Base
from pathkeeper.cli.main import main
from pathkeeper.local.postgres import LocalPostgres

_ids = itertools.count()


@pytest.fixture
def empty_url(pg_cluster: LocalPostgres) -> str:
    """A fresh database with no schema at all (not cloned from the migrated template)."""
    return pg_cluster.create_database(f"pk_empty_{next(_ids)}")


def schema(url: str) -> dict[str, Any]:
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            insp = inspect(conn)
            tables = {
                t: sorted(c["name"] for c in insp.get_columns(t)) for t in insp.get_table_names()
            }
            sequences = sorted(insp.get_sequence_names())
            version = None
            if "alembic_version" in tables:
                version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return {"tables": tables, "sequences": sequences, "version": version}
    finally:
        engine.dispose()


def model_diff(url: str) -> list[Any]:
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    head = ScriptDirectory.from_config(alembic_config(empty_url)).get_heads()
    assert len(head) == 1, f"more than one Alembic head: {head}"
    upgrade(empty_url)
    up = schema(empty_url)
    assert up["version"] == head[0]
    assert {"namespaces", "nodes", "events", "checkpoints"} <= set(up["tables"])
    assert "event_position_seq" in up["sequences"]
    downgrade(empty_url, "base")
    down = schema(empty_url)
    assert set(down["tables"]) <= {"alembic_version"}, down  # nothing of ours is left
    assert down["sequences"] == []
    assert down["version"] is None
    upgrade(empty_url)
    assert schema(empty_url) == up
    # The re-created schema works.
    with Coordinator.connect(empty_url) as coord:
        coord.create_namespace("t")
        coord.mkdir("t", "/a")
        events, _ = coord.read_events(wait=5.0)
        assert [e.type for e in events] == ["namespace_created", "created"]


def test_each_revision_steps_down_and_up(empty_url: str) -> None:
    """Every single step is reversible, not only the whole chain."""
    script = ScriptDirectory.from_config(alembic_config(empty_url))
    revisions = [r.revision for r in reversed(list(script.walk_revisions()))]
    cfg = alembic_config(empty_url)
    for rev in revisions:
        command.upgrade(cfg, rev)
        at = schema(empty_url)
        command.downgrade(cfg, "-1")
        command.upgrade(cfg, rev)
        assert schema(empty_url) == at


def test_models_match_migrations(empty_url: str) -> None:
    upgrade(empty_url)
    assert model_diff(empty_url) == []
    command.check(alembic_config(empty_url))  # what `alembic check` runs: raises on a diff


def test_model_diff_detects_a_drift(empty_url: str) -> None:
    """The comparison above is not vacuous: a column the models lack is reported."""
    upgrade(empty_url)
    engine = create_engine(sqlalchemy_url(empty_url))
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE nodes ADD COLUMN stray integer"))
    engine.dispose()
    diff = model_diff(empty_url)
    assert [d[0] for d in diff] == ["remove_column"]


def test_cli_db_upgrade_and_downgrade(empty_url: str) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["db", "upgrade", "--database-url", empty_url])
    assert res.exit_code == 0, res.output
    assert "upgraded" in res.output
    assert schema(empty_url)["version"] is not None
    res = runner.invoke(main, ["db", "downgrade", "--database-url", empty_url, "base"])
    assert res.exit_code == 0, res.output
    assert schema(empty_url)["version"] is None
    # The SQLAlchemy URL form and the environment variable work too.
    res = runner.invoke(
        main, ["db", "upgrade"],
        env={"PATHKEEPER_DATABASE_URL": sqlalchemy_url(empty_url)},
    )
    assert res.exit_code == 0, res.output
    assert model_diff(empty_url) == []


def test_cli_requires_a_database_url() -> None:
    res = CliRunner().invoke(main, ["db", "upgrade"], env={"PATHKEEPER_DATABASE_URL": None})
    assert res.exit_code != 0
    assert "--database-url" in res.output
