"""``pathkeeper replay``, ``pathkeeper reindex``, ``pathkeeper verify``: thin wrappers
over ``indexer.replay`` and ``indexer.verify``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from indexer.bulk import Rejected
from indexer.contract import DEFAULT_ALIAS
from pathkeeper.cli.options import (
    index_shape,
    index_shape_options,
    search_options,
    servers_options,
    servers_shards,
)

if TYPE_CHECKING:
    from coordinator.shard_map import Shard
    from indexer.replay import RebuildResult
    from indexer.search_client import SearchSecurity

alias_option = click.option(
    "--alias", default=DEFAULT_ALIAS, show_default=True, help="The alias services search."
)


def _valid_namespaces(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    from coordinator.errors import InvalidName
    from coordinator.paths import validate_namespace

    for ns in value:
        try:
            validate_namespace(ns)
        except InvalidName as exc:
            raise click.BadParameter(f"{ns!r}: {exc}") from exc
    return value


def namespace_option(more: str = "") -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--namespace``, its help followed by what it means for the command."""
    return click.option(
        "--namespace", "namespaces", multiple=True, callback=_valid_namespaces,
        help="Only this namespace (repeatable; it must exist)." + (f" {more}" if more else ""),
    )


IN_PLACE = "Rebuilt in place in the live index (no new index, no swap)."


# The namespaces of a list that the log knows as of a position: in an event at or below
# it, or in a stored snapshot taken at or below it (the events it covers may be compacted).
KNOWN_AS_OF_SQL = """
    SELECT DISTINCT namespace FROM events
    WHERE namespace = ANY(:names) AND position <= :until
    UNION
    SELECT DISTINCT n.namespace FROM log_snapshot_nodes n
    JOIN log_snapshots s ON s.id = n.snapshot_id
    WHERE n.namespace = ANY(:names) AND s.position <= :until
"""


def _require_namespaces(coord: Any, namespaces: tuple[str, ...], until: int | None = None
                        ) -> None:
    """Refuse namespaces that do not exist: comparing or rebuilding nothing for them
    and answering "ok" would hide a typo. As of an older position (``until``), one the
    log knows by then counts too (it may have been dropped since)."""
    from sqlalchemy import text

    from coordinator.errors import NotFound

    missing = sorted(set(namespaces) - set(coord.namespaces()))
    if missing and until is not None:
        with coord.engine.connect() as conn:
            known = set(conn.execute(text(KNOWN_AS_OF_SQL),
                                     {"names": missing, "until": until}).scalars())
        missing = [ns for ns in missing if ns not in known]
    if missing:
        where = "" if until is None else f" (now, or in the log up to position {until})"
        raise NotFound(f"--namespace: no namespace {', '.join(map(repr, missing))}{where}")
consumer_option = click.option(
    "--consumer", default="",
    help="The live worker's checkpoint name whose checkpoints move to the rebuilt index's "
         "position after the swap (default: indexer:<alias>, as `indexer run`).",
)
quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress output.")

EXIT_DRIFT = 1
EXIT_ERROR = 2


def counts(by_kind: dict[str, int]) -> str:
    """``{"missing": 0, "extra": 1}`` as ``missing 0, extra 1``."""
    return ", ".join(f"{kind} {n}" for kind, n in by_kind.items())


def _setup(quiet: bool) -> Any:
    from indexer.logs import configure
    from indexer.progress import Progress

    configure(logging.INFO)
    # The client logs every request and each retry with a traceback; a failure that
    # stops the command is reported once, on one line (cli_errors.describe).
    logging.getLogger("elastic_transport").setLevel(logging.ERROR)
    return Progress(enabled=not quiet)


def _run(fn: Callable[[], int]) -> None:
    """Run a command body; a known failure (``cli_errors.describe``: a ReplayError, the
    database or the search server down, a bad URL, no schema) is one line and exit 2."""
    from pathkeeper.cli.errors import describe

    try:
        code = fn()
    except Exception as exc:
        message = describe(exc)
        if message is None:
            raise
        click.echo(f"error: {message}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code)


def _rebuild(
    source: str, servers: tuple[str | None, str | None], es_url: str,
    search_security: SearchSecurity, alias: str, namespaces: tuple[str, ...],
    until: int | None, dry_run: bool, keep_old: bool, quiet: bool, consumer: str,
    shape_options: tuple[int | None, int | None, int | None] = (None, None, None),
    shard: str | None = None,
) -> None:
    """Rebuild from one server, or from every shard of a directory into one index
    (``indexer.replay_shards``): ``--until`` reads the one shard named, ``--namespace``
    rebuilds each namespace from its own shard."""
    from contextlib import ExitStack

    from coordinator import Coordinator
    from indexer.elasticsearch_index import live_shape
    from indexer.replay import build_and_swap, rebuild, rebuild_namespaces
    from indexer.replay_shards import shard_for_until
    from indexer.search_client import open_search

    progress = _setup(quiet)

    def body() -> int:
        shards = servers_shards(*servers)
        if until is not None or shard is not None:
            if until is None:
                from indexer.errors import ReplayError

                raise ReplayError("--shard is for --until (a position of that shard's log)")
            named = shard_for_until([s.name for s in shards], shard)
            shards = [s for s in shards if s.name == named]
        with ExitStack() as stack, progress:
            coords = [(s.name, stack.enter_context(Coordinator.connect(s.database_url())))
                      for s in shards]
            found = {name: set(c.namespaces()) for name, c in coords}
            if len(coords) == 1:
                # As of an older position, a namespace dropped since counts.
                _require_namespaces(coords[0][1], namespaces, until)
            else:
                _require_on_some_shard(namespaces, found)
            es = open_search(es_url, security=search_security, request_timeout=120)
            stack.callback(es.close)
            # The options left out keep the live index's values.
            shape = (index_shape(*shape_options, base=live_shape(es, alias))
                     if shape_options != (None, None, None) else None)
            positions = ""
            if namespaces and until is None:
                result: RebuildResult | None = None
                for name, coord in coords:
                    mine = [n for n in namespaces if n in found[name]] if len(coords) > 1 \
                        else list(namespaces)
                    if mine:
                        one = rebuild_namespaces(coord, es, mine, source=source, alias=alias,
                                                 dry_run=dry_run, progress=progress)
                        result = _added(result, one)
                assert result is not None
            elif len(coords) == 1 or dry_run:
                result = None
                for _, coord in coords:
                    result = _added(result, rebuild(
                        coord, es, source=source, alias=alias, until=until,
                        namespaces=namespaces or None, dry_run=dry_run, keep_old=keep_old,
                        progress=progress, consumer=consumer or None, shape=shape,
                    ))
                assert result is not None
                if len(coords) > 1:
                    positions = "each shard's current position"
            else:
                out = build_and_swap(coords, es, source=source, alias=alias,
                                     keep_old=keep_old, progress=progress,
                                     consumer=consumer or None, shape=shape)
                result = out.result
                positions = "positions " + ", ".join(
                    f"{name} {p}" for name, p in out.positions.items())
        progress.summary.seconds = result.seconds
        what = "would write" if dry_run else "wrote"
        click.echo(
            f"{source}: {what} {result.documents} documents as of "
            + (positions or f"position {result.position}")
            + (f" into {result.index}" if result.index else "")
            + (f", swapped {alias} (was {', '.join(result.old_indices) or 'nothing'})"
               if result.swapped else "")
            + (f", deleted {', '.join(result.deleted)}" if result.deleted else "")
            + (f", cleaned up {', '.join(result.cleaned_up)}" if result.cleaned_up else "")
        )
        if result.checkpoints_moved:
            to = "each shard's final position" if len(coords) > 1 \
                else f"position {result.final_position}"
            click.echo(f"moved {result.checkpoints_moved} checkpoints of the live worker to "
                       f"{to}: it reads on from the new index")
        click.echo(f"summary: {progress.summary.line()}")
        return _report_too_large(result.too_large)

    _run(body)


def _added(total: RebuildResult | None, one: RebuildResult) -> RebuildResult:
    """``one`` folded into ``total``: rebuilds of several shards (a dry run, or some
    namespaces in place) reported as one."""
    if total is None:
        return one
    total.documents += one.documents
    total.tail_events += one.tail_events
    total.rejected += one.rejected
    total.too_large += one.too_large
    total.checkpoints_moved += one.checkpoints_moved
    total.seconds += one.seconds
    return total


def _require_on_some_shard(namespaces: tuple[str, ...], found: dict[str, set[str]]) -> None:
    """``_require_namespaces`` over several shards: each namespace on one of them."""
    from coordinator.errors import NotFound

    everywhere = set().union(*found.values())
    missing = sorted(n for n in namespaces if n not in everywhere)
    if missing:
        raise NotFound(f"--namespace: no namespace {', '.join(map(repr, missing))}")


def _report_too_large(too_large: list[Rejected]) -> int:
    """Name the documents a rebuild left out because the search server takes none of
    them in a request: exit 1 (the index differs from PostgreSQL by them), as verify
    does for drift. They are dead letters of the live worker now."""
    if not too_large:
        return 0
    n = len(too_large)
    noun = "document" if n == 1 else "documents"
    click.echo(f"warning: {n} {noun} too large for the search server, left out of the index "
               "(recorded as dead letters: pathkeeper indexer dead-letters):")
    for r in too_large:
        click.echo(f"  {r.namespace} {r.node_id} ({r.size} bytes)")
    return EXIT_DRIFT


@click.command("replay")
@servers_options
@search_options(url_required=True)
@alias_option
@namespace_option(f"Without --until: {IN_PLACE[0].lower()}{IN_PLACE[1:]}")
@click.option("--until", type=int, default=None,
              help="Build the state as of this log position into an index that is NOT "
                   "swapped in (for audits).")
@click.option("--shard", default=None, metavar="NAME",
              help="With --until: the shard (database server) whose log the position is "
                   "of; needed when there are several.")
@click.option("--dry-run", is_flag=True, help="Only count the documents.")
@click.option("--keep-old", is_flag=True, help="Keep the previous index after the swap.")
@consumer_option
@quiet_option
@index_shape_options("Default: the live index's shape; each one given changes it in the "
                     "new index")
def replay(
    database_url: str | None, directory_url: str | None, es_url: str,
    search_security: SearchSecurity, alias: str, namespaces: tuple[str, ...],
    until: int | None, shard: str | None, dry_run: bool, keep_old: bool, consumer: str,
    quiet: bool, shards: int | None, replicas: int | None, namespace_shards: int | None,
) -> None:
    """Rebuild the index from the event log alone, then swap the alias to it and move the
    live worker's checkpoints to it (also what a worker behind the compaction horizon
    needs). With --directory-url: from every shard's log into one index, one swap."""
    _rebuild("events", (database_url, directory_url), es_url, search_security, alias,
             namespaces, until, dry_run, keep_old, quiet, consumer,
             (shards, replicas, namespace_shards), shard)


@click.command("reindex")
@servers_options
@search_options(url_required=True)
@alias_option
@namespace_option(IN_PLACE)
@click.option("--dry-run", is_flag=True, help="Only count the documents.")
@click.option("--keep-old", is_flag=True, help="Keep the previous index after the swap.")
@consumer_option
@quiet_option
@index_shape_options("Default: the live index's shape; each one given changes it in the "
                     "new index")
def reindex(
    database_url: str | None, directory_url: str | None, es_url: str,
    search_security: SearchSecurity, alias: str, namespaces: tuple[str, ...], dry_run: bool,
    keep_old: bool, consumer: str, quiet: bool, shards: int | None, replicas: int | None,
    namespace_shards: int | None,
) -> None:
    """Rebuild the index from a snapshot of the nodes table plus the event tail (and move
    the live worker's checkpoints to it, as replay does). With --directory-url: from every
    shard into one index, one swap."""
    _rebuild("snapshot", (database_url, directory_url), es_url, search_security, alias,
             namespaces, None, dry_run, keep_old, quiet, consumer,
             (shards, replicas, namespace_shards))


@click.command("verify")
@servers_options
@search_options(url_required=True)
@alias_option
@namespace_option()
@click.option("--repair", is_flag=True, help="Rewrite exactly the drifted documents.")
@click.option("--log/--no-log", "check_log", default=True, show_default=True,
              help="Also check that folding the event log reproduces the nodes table.")
@click.option("--settle-timeout", default=30.0, show_default=True, metavar="SECONDS",
              help="Seconds to wait for the live worker before calling a difference drift.")
@quiet_option
def verify(
    database_url: str | None, directory_url: str | None, es_url: str,
    search_security: SearchSecurity, alias: str, namespaces: tuple[str, ...], repair: bool,
    check_log: bool, settle_timeout: float, quiet: bool,
) -> None:
    """Compare PostgreSQL with the index (and the log with nodes); exit 1 on drift."""
    progress = _setup(quiet)
    _run(lambda: verify_report(servers_shards(database_url, directory_url), es_url,
                               search_security, alias, namespaces, repair, check_log,
                               settle_timeout, progress))


def verify_report(
    shards: list[Shard], es_url: str, search_security: SearchSecurity, alias: str,
    namespaces: tuple[str, ...], repair: bool, check_log: bool, settle_timeout: float,
    progress: Any,
) -> int:
    """Verify over ``shards`` and print what differs; returns the exit status. With
    several shards each shard's part is headed ``shard NAME:`` and its drift lines name
    it; with one the output is that of one server."""
    from contextlib import ExitStack

    from coordinator import Coordinator
    from coordinator.indexing import consumer_for, indexed_through, wait_indexed
    from indexer.search_client import open_search
    from indexer.verify import Settle
    from indexer.verify_shards import verify_shards

    several = len(shards) > 1
    consumer = consumer_for(alias)

    def settle_for(coord: Coordinator) -> Settle | None:
        with coord.engine.connect() as conn:
            if indexed_through(conn, consumer) is None:
                return None  # no worker ever ran on this shard: nothing to wait for
        return lambda position: wait_indexed(coord.engine, position, settle_timeout, consumer)

    drift = False
    with ExitStack() as stack:
        coords = [(s.name, stack.enter_context(Coordinator.connect(s.database_url())))
                  for s in shards]
        stack.enter_context(progress)
        if not several:
            _require_namespaces(coords[0][1], namespaces)
        es = open_search(es_url, security=search_security, request_timeout=120)
        try:
            results = verify_shards(
                coords, es, alias=alias, namespaces=namespaces or None, repair_drift=repair,
                settle_for=settle_for, check_log=check_log, progress=progress)
        finally:
            es.close()
        for result in results:
            report, where = result.index, f" shard {result.shard}" if several else ""
            if several:
                click.echo(f"shard {result.shard}:")
            click.echo(
                f"index {alias}: {report.compared} documents compared, "
                f"{len(report.drift)} drifted ({counts(report.by_kind())}), "
                f"{len(report.dead_lettered)} dead-lettered (pathkeeper indexer dead-letters)"
            )
            for d in report.drift[:50]:
                extra = f" fields={','.join(d.fields)}" if d.fields else ""
                click.echo(f"  {d.kind}{where} {d.namespace} {d.node_id}{extra}")
            for d in report.dead_lettered[:50]:
                click.echo(f"  dead letter{where} {d.namespace} {d.node_id}: {d.fields[0]}")
            if repair and report.drift:
                click.echo(f"repaired {report.repaired}; not repaired (a newer version is "
                           f"indexed, or too large for the search server: a dead letter "
                           f"now): {len(report.not_repaired)}")
            drift = drift or (bool(report.drift) and not (repair and not report.not_repaired))
            log_report = result.log
            if log_report is not None:
                click.echo(
                    f"event log{where}: {log_report.events} events folded, "
                    f"{log_report.nodes} nodes compared, {len(log_report.drift)} differ, "
                    f"{log_report.anomaly_count} inconsistencies"
                )
                for d in log_report.drift[:50]:
                    extra = f" fields={','.join(d.fields)}" if d.fields else ""
                    label = {"missing": "in nodes, not in the log",
                             "extra": "in the log, not in nodes"}.get(d.kind, d.kind)
                    click.echo(f"  {label}{where} {d.namespace} {d.node_id}{extra}")
                for a in log_report.anomalies[:20]:
                    click.echo(f"  {a}")
                drift = drift or not log_report.ok
    click.echo(f"summary: {progress.summary.line('documents')}")
    return EXIT_DRIFT if drift else 0
