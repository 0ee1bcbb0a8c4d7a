"""``pathkeeper snapshot take|list`` and ``pathkeeper compact``: thin wrappers over
``indexer.retention``. Errors are one line on stderr and exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta

import click

from pathkeeper.cli.options import check_duration, database_url_option

RETAIN_ENV = "PATHKEEPER_RETENTION"
EXIT_ERROR = 2


def _run(fn: Callable[[], None]) -> None:
    from coordinator import CoordinatorError
    from indexer.errors import ReplayError
    from indexer.retention import RetentionError

    try:
        fn()
    except (RetentionError, ReplayError, CoordinatorError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)


def _engine(database_url: str):  # type: ignore[no-untyped-def]
    from sqlalchemy import create_engine

    from coordinator.db import sqlalchemy_url

    return create_engine(sqlalchemy_url(database_url))


@click.group("snapshot")
def snapshot() -> None:
    """Stored snapshots of the folded event log (replay and verify start from the newest)."""


@snapshot.command("take")
@database_url_option
@click.option("--until", type=int, default=None,
              help="Snapshot the state as of this position (default: the safe end of the log).")
def snapshot_take(database_url: str, until: int | None) -> None:
    """Fold the log (from the previous snapshot) and store the state of every namespace."""
    from indexer.retention import take_snapshot

    def body() -> None:
        engine = _engine(database_url)
        try:
            s = take_snapshot(engine, until)
        finally:
            engine.dispose()
        base = f"snapshot {s.base_snapshot} + " if s.base_snapshot is not None else ""
        click.echo(
            f"snapshot {s.id} as of position {s.position}: {s.namespaces} namespaces, "
            f"{s.nodes} nodes, from {base}{s.events_folded} events in {s.seconds:.1f} s"
            + (f"; {s.anomalies} inconsistencies in the log (see pathkeeper verify)"
               if s.anomalies else "")
        )

    _run(body)


@snapshot.command("list")
@database_url_option
def snapshot_list(database_url: str) -> None:
    """The stored snapshots, oldest first, and the compaction horizon."""
    from indexer.retention import current_horizon, list_snapshots

    def body() -> None:
        engine = _engine(database_url)
        try:
            for s in list_snapshots(engine):
                click.echo(f"{s.id}\tposition {s.position}\t{s.taken_at:%Y-%m-%d %H:%M:%S%z}"
                           f"\t{s.namespaces} namespaces\t{s.nodes} nodes")
            horizon = current_horizon(engine)
        finally:
            engine.dispose()
        click.echo(f"horizon: {horizon}" + (" (the log is whole)" if horizon == 0 else
                                            " (events at or below it were compacted)"))

    _run(body)


@click.command("compact")
@database_url_option
@click.option("--retain", envvar=RETAIN_ENV, default="7d", show_default=True,
              metavar="DURATION", callback=check_duration,
              help="Keep events younger than this (7d, 12h, 30m, 0): only a snapshot at "
                   "least this old may be compacted up to.")
@click.option("--force", is_flag=True,
              help="Also compact past consumers' checkpoints (they then get cursor_expired "
                   "and must be rebuilt), or when no consumer has a checkpoint at all.")
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
def compact(database_url: str, retain: timedelta, force: bool, dry_run: bool) -> None:
    """Delete the events a stored snapshot covers. Afterwards replay --until below the
    horizon and change-feed cursors below it fail with a clear error."""
    from indexer.retention import compact as do_compact

    def body() -> None:
        engine = _engine(database_url)
        try:
            r = do_compact(engine, retain, force=force, dry_run=dry_run)
        finally:
            engine.dispose()
        if r.snapshot_id is None:
            click.echo(r.reason)
            return
        verb = "would delete" if dry_run else "deleted"
        click.echo(
            f"{verb} {r.events_deleted} events at or below position {r.horizon} "
            f"(snapshot {r.snapshot_id}; horizon was {r.previous_horizon})"
            + ("" if dry_run else f", {r.snapshots_deleted} older snapshots")
        )

    _run(body)
