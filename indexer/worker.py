"""The indexer worker process: leases partitions, reads the event log, applies batches.

How a change reaches Elasticsearch (``indexer.applier`` has the batch rules and
why they are safe):

1. Namespaces are split into ``N`` partitions by a hash of their name
   (``coordinator.event_reader.Partition``). A worker holds a partition with a
   session advisory lock on a dedicated connection (``indexer.leases``): it dies
   with the process, so a ``kill -9``'d worker's partitions are free at once.
   Workers count each other and each takes its fair share; an idle worker keeps
   trying to grab free partitions.
2. Each held partition has its own runner (``indexer.partition_runner``), so a huge batch
   holds up only the namespaces of its partition, and each runner has two lanes:
   the *node lane* (its thread) reads a batch with
   ``read_events(after=read_cursor, partition=...)``, which returns whole
   transactions in a gap-safe order and a cursor, writes the documents of the
   nodes the events name (``Applier.read_nodes`` / ``send_nodes``, one per event
   at most; the request goes out from a sender thread while the lane reads the
   next batch, two requests in flight at most) and, once Elasticsearch
   acknowledged it, hands the batch's subtree rewrites and sweeps to the *subtree lane*
   (``indexer.subtree_lane``, a second thread), which merges whatever piles up while it
   works and applies it with one snapshot and at most one refresh and one sweep
   (none when nothing can have been left under a stale path). So a file
   rename behind a 10,000-document directory rename is visible in milliseconds,
   and directory moves no longer cost a batch each. External versions make the
   two lanes safe to run side by side (the rule in ``indexer.applier``). The
   checkpoint moves to the node lane's acknowledged cursor, but never past the batch before the
   subtree lane's oldest unfinished work (``publish_checkpoint``), so
   ``wait_indexed(seq)`` keeps meaning "everything up to ``seq`` is in the
   index". Any error: capped exponential backoff, the same work again.
3. Latency: ``LISTEN pathkeeper_events`` (``indexer.wakeup``): each notification
   names the partition hashes of the namespaces its transaction wrote, and wakes
   only those partitions' runners; a runner whose request was answered wakes the
   others, so the checkpoints of partitions with nothing of their own keep up with it
   (``wait_indexed`` waits for every partition) without each of them chasing a busy
   log on its own; an APScheduler interval job (``max_instances=1``,
   ``coalesce=True``) wakes every runner, as the polling fallback, and rebalances.
4. SIGTERM/SIGINT: runners abandon their batch at the next chunk boundary (it is
   re-applied by whoever runs next: idempotent), leases are released, exit 0.

Deleted-then-recreated and ``index.gc_deletes``: see ``indexer.applier``. Around the
runners, this module keeps only the process: setup, leases and rebalancing, wake-ups,
signals and the main loop; what it reports lives beside it (``indexer.read_waits``,
``indexer.index_health``, ``indexer.scheduled_jobs``, ``indexer.deadletters.reject``).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any

import psycopg
from sqlalchemy import Engine

from coordinator import Coordinator, paths
from coordinator.errors import NotMigrated
from coordinator.indexing import consumer_for
from coordinator.shard_map import ShardMap, SingleShard

from . import checkpoints, metrics
from .bulk import IN_FLIGHT
from .contract import DEFAULT_ALIAS, IndexShape
from .elasticsearch_index import IndexMissing, MappingOutdated
from .index_health import IndexHealth
from .logs import log
from .partition_runner import PartitionRunner
from .scheduled_jobs import add_snapshot, add_verify, refresh_lag_metrics
from .search_client import open_search
from .search_engine import UnsupportedEngine
from .shard_work import ShardNeedsRebuild, ShardWork
from .wakeup import Listener

logger = logging.getLogger("pathkeeper.indexer")


@dataclass(frozen=True)
class WorkerConfig:
    database_url: str
    es_url: str
    alias: str = DEFAULT_ALIAS
    partitions: int = 4
    #: Checkpoint and lease name; defaults to ``indexer:<alias>``.
    consumer: str = ""
    #: Events per read (whole transactions: a batch may be larger).
    batch_events: int = 1000
    #: Bulk actions per request.
    chunk_size: int = 1000
    poll_interval: float = 1.0
    #: Process until caught up with the log as of start, then exit.
    once: bool = False
    backoff_base: float = 0.05
    backoff_cap: float = 10.0
    metrics_port: int | None = None
    es_request_timeout: float = 60.0
    #: How long ``read_events`` waits for in-flight transactions before giving up a round.
    read_wait: float = 5.0
    #: A read that has waited this long for event log writers in flight reports them:
    #: ``log_read_waiting`` (warning) and the ``read_*`` metrics. Keep it below ``read_wait``.
    read_report_after: float = 3.0
    es_options: dict[str, Any] = field(default_factory=dict)
    #: Node-lane bulk requests a partition keeps in flight: while one is answered, the
    #: next batch is read and its nodes fetched (``PartitionRunner``). 1: none overlap.
    node_bulks_in_flight: int = 2
    #: Run ``verify`` of the alias on this crontab schedule (``verify.cron_trigger``:
    #: five fields, or six with seconds first) and export the drift count as the
    #: ``pathkeeper_verify_drift`` gauge. None (the default): never.
    verify_cron: str | None = None
    #: Take a snapshot of the event log on this crontab schedule, then compact with
    #: ``compact_retain`` if set (``indexer.retention.scheduled_snapshot``: of several
    #: workers, one takes it). None (the default): never.
    snapshot_cron: str | None = None
    compact_retain: timedelta | None = None
    #: The writers' content limit (``coordinator.Settings.max_content_bytes``): checked
    #: at start against the search server's request limit (a warning if it cannot fit).
    max_content_bytes: int = paths.MAX_CONTENT_BYTES
    #: The shape of the index the worker creates (None: the default shape for a first
    #: index, the live index's for a bootstrap rebuild).
    index_shape: IndexShape | None = None

    @property
    def consumer_name(self) -> str:
        return consumer_for(self.alias, self.consumer)


class Worker:
    """One indexer process. ``run()`` blocks until ``stop()`` (or SIGTERM), or, with
    ``once``, until every partition it could lease has caught up.

    ``shard_map``: the PostgreSQL servers whose logs it indexes (default: the one server
    ``config.database_url``). Each shard is run as one server was (``ShardWork``); all
    write into the one index."""

    def __init__(self, config: WorkerConfig, shard_map: ShardMap | None = None) -> None:
        self.config = config
        self.consumer = config.consumer_name
        n = config.partitions
        self.shard_map: ShardMap = shard_map or SingleShard(config.database_url)
        shards = self.shard_map.shards()
        self.es = open_search(
            config.es_url, request_timeout=config.es_request_timeout, max_retries=0,
            retry_on_timeout=False,
            # Per partition: the node lane's requests in flight and the subtree lane's.
            connections_per_node=max(
                10, (config.node_bulks_in_flight + IN_FLIGHT) * n * len(shards)),
            **config.es_options,
        )
        self.index_health = IndexHealth(self.es, config.alias, self.consumer)
        several = len(shards) > 1
        self.shards = [ShardWork(self, s, f"{s.name}/" if several else "") for s in shards]
        self._stop = threading.Event()
        self._main_wake = threading.Event()
        self.crashes = 0
        self._last_lag = 0.0
        self.ready = threading.Event()

    # The first shard's parts: with one server (no shard map), the worker's own.

    @property
    def coord(self) -> Coordinator:
        return self.shards[0].coord

    @property
    def engine(self) -> Engine:
        return self.shards[0].engine

    @property
    def listener(self) -> Listener:
        return self.shards[0].listener

    @property
    def runners(self) -> dict[int, PartitionRunner]:
        return self.shards[0].runners

    @property
    def target(self) -> int | None:
        return self.shards[0].target

    # ------------------------------------------------------------ controls

    def stop(self) -> None:
        """Ask the worker to finish: it abandons batches in flight and returns."""
        self._stop.set()
        self._main_wake.set()

    def wake_main(self) -> None:
        self._main_wake.set()

    def wake_all(self) -> None:
        for sw in self.shards:
            sw.wake_all()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log(logger, logging.INFO, "shutdown_requested", signal=signal.Signals(signum).name)
        self.stop()

    # ------------------------------------------------------------ helpers

    def _setup(self) -> bool:
        """The index and each shard's checkpoint layout and membership, retried until
        they work or stop: every shard with ``once`` (it must reach each shard's
        target), else at least one (the others are tried again by ``_rebalance``, each
        with its own backoff, so a shard that is down holds up no other)."""
        checked_limit = False
        while not self._stop.is_set():
            for sw in self.shards:
                if sw.ready or not sw.due():
                    continue
                if self._try_setup(sw) is False:
                    return False
                if sw.ready and not checked_limit:
                    checked_limit = True
                    self.index_health.check_request_limit(self.config.max_content_bytes)
            ready = [sw.ready for sw in self.shards]
            if all(ready) or (any(ready) and not self.config.once):
                return True
            self._stop.wait(max(0.0, min(sw.retry_in() for sw in self.shards if not sw.ready)))
        return False

    def _try_setup(self, sw: ShardWork) -> bool | None:
        """Set up one shard: True when done, False if stopped meanwhile, None after an
        error (backed off). What no retry can cure is raised with one shard (or with
        ``once``: it could not finish); with several, only that shard waits for it, said
        loudly (``shard_cannot_start``), and the others go on."""
        several = len(self.shards) > 1
        try:
            return sw.setup(self._stop, several)
        except (IndexMissing, checkpoints.LayoutMismatch, MappingOutdated, ShardNeedsRebuild,
                UnsupportedEngine, NotMigrated) as exc:
            if isinstance(exc, IndexMissing):
                metrics.INDEX_MISSING.labels(self.consumer).set(1)
            if several and not self.config.once:
                log(logger, logging.ERROR, "shard_cannot_start", shard=sw.shard.name,
                    error=f"{type(exc).__name__}: {exc}")
                sw.setup_failed(exc)
                return None
            if isinstance(exc, IndexMissing):
                log(logger, logging.ERROR, "index_missing", alias=self.config.alias,
                    error=str(exc))
            elif isinstance(exc, UnsupportedEngine):
                log(logger, logging.ERROR, "search_engine_unsupported", error=str(exc))
            elif isinstance(exc, NotMigrated):
                log(logger, logging.ERROR, "schema_not_migrated", error=str(exc))
            raise
        except Exception as exc:
            delay = sw.setup_failed(exc)
            log(logger, logging.WARNING, "startup_failed",
                error=f"{type(exc).__name__}: {exc}", retry_in=round(delay, 3), **sw.where)
            return None

    def _shards_field(self) -> dict[str, Any]:
        """The ``shards`` log field (those set up): none with one shard."""
        if len(self.shards) == 1:
            return {}
        return {"shards": ",".join(sw.shard.name for sw in self.shards if sw.ready)}

    def _tick(self) -> None:
        """The polling fallback (APScheduler job): wake everyone, refresh lag metrics."""
        self.wake_all()
        self._main_wake.set()
        if self.config.metrics_port is None or time.monotonic() - self._last_lag < 5.0:
            return
        self._last_lag = time.monotonic()
        for sw in self.shards:
            if sw.ready:
                refresh_lag_metrics(sw.engine, self.consumer, sw.label_prefix)

    def _rebalance(self) -> None:
        """Each shard: set it up if it is not yet (when its backoff allows), keep our
        fair share of its partitions, replace lost leases and crashed runners."""
        for sw in self.shards:
            if not sw.ready:
                if not sw.due() or not self._try_setup(sw):
                    continue
            try:
                self.crashes += sw.rebalance()
            except psycopg.Error as exc:
                # The lease connection broke between alive() and the next lease query
                # (server restart, pg_terminate_backend): the next round sees it closed
                # and rejoins, instead of the whole worker stopping.
                log(logger, logging.WARNING, "lease_connection_failed", error=str(exc),
                    **sw.where)
        metrics.PARTITIONS_HELD.labels(self.consumer).set(
            sum(len(sw.runners) for sw in self.shards))

    # ------------------------------------------------------------ main loop

    def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        with self._process_settings():
            return self._run()

    @contextmanager
    def _process_settings(self) -> Iterator[None]:
        """The process-wide settings a worker in the main thread takes, given back when it
        stops: a program that runs a worker and goes on (a test, an embedding service)
        gets its own signal handlers and switch interval back."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self._on_signal)
                    for s in (signal.SIGTERM, signal.SIGINT)}
        interval = sys.getswitchinterval()
        # The worker process (not a worker in someone else's thread): a subtree
        # lane turning rows into bulk bodies holds the GIL for up to the switch
        # interval (5 ms) each time a node lane's reply arrives; a node-lane batch
        # waits on ~15 replies. 0.5 ms keeps that wait out of file-rename latency.
        sys.setswitchinterval(0.0005)
        try:
            yield
        finally:
            sys.setswitchinterval(interval)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _run(self) -> int:
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler()
        code = 0
        stop_metrics: Callable[[], None] | None = None
        try:
            if self.config.metrics_port is not None:
                stop_metrics = metrics.serve(self.config.metrics_port)
            if not self._setup():
                return 0
            log(logger, logging.INFO, "worker_started", consumer=self.consumer,
                alias=self.config.alias, partitions=self.config.partitions,
                slot=self.shards[0].leases.slot, once=self.config.once, target=self.target,
                **self._shards_field())
            scheduler.add_job(
                self._tick, "interval", seconds=self.config.poll_interval,
                max_instances=1, coalesce=True, id="poll",
            )
            if self.config.verify_cron:
                add_verify(scheduler, [(sw.shard.name, sw.coord) for sw in self.shards],
                           self.es, self.config.alias, self.consumer, self.config.verify_cron)
            if self.config.snapshot_cron:
                for sw in self.shards:
                    add_snapshot(scheduler, sw.engine, self.config.snapshot_cron,
                                 self.config.compact_retain, sw.shard.name)
            scheduler.start()
            while not self._stop.is_set():
                self._rebalance()
                self.ready.set()
                if self.config.once and not any(sw.runners for sw in self.shards):
                    break
                self._main_wake.wait(self.config.poll_interval)
                self._main_wake.clear()
            if self.config.once and self.crashes:
                code = 1
        finally:
            if scheduler.running:
                scheduler.shutdown(wait=False)
            for sw in self.shards:
                sw.close()
            self.es.close()
            if stop_metrics is not None:
                stop_metrics()
            log(logger, logging.INFO, "worker_stopped", consumer=self.consumer)
        return code
