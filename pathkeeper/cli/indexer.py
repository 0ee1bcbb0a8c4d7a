"""``pathkeeper indexer ...``: run the worker, show its lag, list and retry dead letters."""

from __future__ import annotations

import contextlib
import logging
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from coordinator.indexing import consumer_for
from pathkeeper.cli.indexer_status import status_cmd
from pathkeeper.cli.options import (
    check_duration,
    consumer_option,
    database_url_option,
    index_shape,
    index_shape_options,
    max_content_bytes_option,
    search_options,
    servers_options,
    servers_shards,
    worker_alias_option,
)
from pathkeeper.local.search import SEARCH_ENV, VERSION_ENV

if TYPE_CHECKING:
    from indexer.search_client import SearchSecurity


def _check_cron(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Refuse a bad schedule at start-up, not when the scheduler first uses it."""
    if value is None:
        return None
    from indexer.verify import cron_trigger

    try:
        cron_trigger(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    return value


@click.group()
def indexer() -> None:
    """The indexer: replicates the event log into Elasticsearch."""


@indexer.command("run")
@servers_options
@search_options(url_required=True)
@worker_alias_option
@consumer_option
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(min=1),
              help="Partitions of the namespaces (every worker of a consumer must agree).")
@click.option("--once", is_flag=True, help="Catch up with the log as of now, then exit.")
@click.option("--give-up-after", default=60.0, show_default=True,
              type=click.FloatRange(0, min_open=True), metavar="SECONDS",
              help="With --once: exit 2 when PostgreSQL or the search server has not "
                   "answered for this long (without --once the worker waits for them).")
@click.option("--batch-events", default=1000, show_default=True)
@click.option("--chunk-size", default=1000, show_default=True, help="Bulk actions per request.")
@click.option("--poll-interval", default=1.0, show_default=True, metavar="SECONDS",
              help="Seconds between polls (the fallback to LISTEN/NOTIFY).")
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus metrics here.")
@click.option("--verify-cron", default=None, metavar="CRONTAB", callback=_check_cron,
              help='Also run verify on this schedule, e.g. "0 3 * * *" (five crontab '
                   "fields, or six with seconds first; weekday numbers start at 0 = "
                   "Monday, so prefer names) and export the drift as the "
                   "pathkeeper_verify_drift gauge. Off by default.")
@click.option("--snapshot-cron", default=None, metavar="CRONTAB", callback=_check_cron,
              help="Also take a snapshot of the event log on this schedule (same forms as "
                   "--verify-cron); of several workers, one takes it. Off by default.")
@click.option("--compact-retain", default=None, metavar="DURATION", callback=check_duration,
              help="After each scheduled snapshot, compact the log keeping events younger "
                   "than this (7d, 12h, 30m, 0); never past a consumer's checkpoint. "
                   "Needs --snapshot-cron.")
@max_content_bytes_option
@index_shape_options("Used when the worker creates the index (the first time, or from a "
                     "snapshot of nodes on a compacted log); an existing index keeps its "
                     "shape: `pathkeeper reindex` with these options builds a new one")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def run(
    database_url: str | None, directory_url: str | None, es_url: str,
    search_security: SearchSecurity,
    alias: str, consumer: str, partitions: int, once: bool,
    give_up_after: float, batch_events: int, chunk_size: int, poll_interval: float,
    metrics_port: int | None,
    verify_cron: str | None, snapshot_cron: str | None, compact_retain: timedelta | None,
    max_content_bytes: int, shards: int | None, replicas: int | None,
    namespace_shards: int | None, verbose: bool,
) -> None:
    """Run the worker until SIGTERM (or, with --once, until caught up); with
    --directory-url, over every server the directory names, into one index."""
    if compact_retain is not None and snapshot_cron is None:
        raise click.UsageError("--compact-retain needs --snapshot-cron")
    from coordinator.shard_map import ShardMap, SingleShard

    servers = servers_shards(database_url, directory_url)
    first_url = servers[0].database_url()
    shard_map: ShardMap
    if directory_url:
        from coordinator.shard_directory import DirectoryMap

        shard_map = DirectoryMap(directory_url, listen=False)
    else:
        shard_map = SingleShard(first_url)
    shape = index_shape(shards, replicas, namespace_shards)
    from indexer.logs import configure
    from indexer.worker import Worker, WorkerConfig

    configure(logging.DEBUG if verbose else logging.INFO)
    config = WorkerConfig(
        database_url=first_url, es_url=es_url, alias=alias, consumer=consumer,
        partitions=partitions, once=once, batch_events=batch_events, chunk_size=chunk_size,
        poll_interval=poll_interval, metrics_port=metrics_port, verify_cron=verify_cron,
        snapshot_cron=snapshot_cron, compact_retain=compact_retain,
        max_content_bytes=max_content_bytes, index_shape=shape,
        es_options={"security": search_security},
    )
    from indexer.checkpoints import LayoutMismatch
    from indexer.elasticsearch_index import IndexMissing, MappingOutdated
    from indexer.shard_work import ShardNeedsRebuild
    from pathkeeper.cli.errors import EXIT_CANNOT_RUN
    from pathkeeper.cli.outage_watch import OutageWatch

    worker = Worker(config, shard_map)
    # With several servers it watches the first one's (and the search server).
    watch = (OutageWatch(first_url, es_url, give_up_after, worker.stop,
                         security=search_security) if once else None)
    try:
        with watch or contextlib.nullcontext():
            code = worker.run()
    except (LayoutMismatch, MappingOutdated, IndexMissing, ShardNeedsRebuild) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    finally:
        shard_map.close()
    if watch is not None and watch.failure is not None:
        click.echo(f"error: {watch.failure}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    sys.exit(code)


indexer.add_command(status_cmd)


@indexer.command("dead-letters")
@database_url_option
@worker_alias_option
@consumer_option
@click.option("--retry", is_flag=True, help="Write each node again as it is now.")
@search_options(url_required=False)
def dead_letters_cmd(
    database_url: str, alias: str, consumer: str, retry: bool, es_url: str | None,
    search_security: SearchSecurity,
) -> None:
    """List documents Elasticsearch rejected for good; --retry writes them again."""
    from coordinator import Coordinator
    from indexer import deadletters
    from indexer.search_client import open_search

    name = consumer_for(alias, consumer)
    with Coordinator.connect(database_url) as coord:
        letters = deadletters.pending(coord.engine, name)
        for d in letters:
            click.echo(f"#{d.id} {d.created_at:%Y-%m-%d %H:%M:%S} ns={d.namespace} "
                       f"node={d.node_id or '-'} position={d.position} error={d.error}")
        click.echo(f"{len(letters)} pending")
        if retry and letters:
            if not es_url:
                raise click.UsageError("--retry needs --es-url")
            es = open_search(es_url, security=search_security)
            try:
                fixed, failed = deadletters.retry(coord.engine, es, alias, name)
            finally:
                es.close()
            click.echo(f"retried: {fixed} fixed, {failed} still failing")
            if failed:
                sys.exit(1)


__all__ = ["indexer"]


@click.command("search-node")
@click.option("--engine", type=click.Choice(["elasticsearch", "opensearch", "noida"],
                                            case_sensitive=False),
              envvar=SEARCH_ENV, default=None,
              help="Which server (default: elasticsearch; noida is the stand-in).")
@click.option("--version", "version", envvar=VERSION_ENV, default=None,
              help="Its version (default: the engine's; Elasticsearch 8.19.21 or 9.1.0, "
              "OpenSearch 2.19.1 or 3.3.0).")
@click.option("--port", type=int, default=0, help="HTTP port (default: a free one).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the node's config and data here (default: a temp dir, removed).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes of one cluster (512 MB heaps each; --port is then ignored).")
def search_node(engine: str | None, version: str | None, port: int,
                data_dir: str | None, nodes: int) -> None:
    """Run a throwaway local search node (or cluster) until Ctrl-C, fetched once from
    Maven Central and run on an installed JDK that suits its version. Handy for
    ES_URL=... ./dev test without a start per run."""
    import signal
    import threading

    from pathkeeper.local.search import LocalServerError, new_local_search, search_kind
    from pathkeeper.local.search_cluster import LocalSearchCluster

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def until_stopped() -> None:
        try:
            while not stop.wait(3600):
                pass
        except KeyboardInterrupt:
            pass

    try:
        if nodes == 1:
            server = new_local_search(data_dir, port, engine=engine, version=version)
            with server:
                click.echo(f"{server.label} on {server.url} (pid {server.pid}); "
                           "Ctrl-C stops it")
                until_stopped()
            return
        kind = engine or search_kind()
        if kind == "noida":
            raise LocalServerError("noida-db, the stand-in, runs as one process: --nodes "
                                   "needs elasticsearch or opensearch")
        with LocalSearchCluster(nodes, engine=kind, version=version,
                                data_dir=data_dir) as cluster:
            click.echo(f"{cluster.label} formed; Ctrl-C stops it")
            for node in cluster.nodes:
                click.echo(f"{node.name} on {node.url} (pid {node.pid})")
            until_stopped()
    except LocalServerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
