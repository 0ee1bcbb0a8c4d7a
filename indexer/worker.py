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
   only those partitions' runners; a runner that read events wakes the others, so
   the checkpoints of partitions with nothing of their own keep up with it
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
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from types import FrameType
from typing import Any

import psycopg

from coordinator import Coordinator, paths
from coordinator.errors import NotMigrated
from coordinator.event_reader import notified_partitions, wait_for_bound
from coordinator.indexing import consumer_for
from coordinator.migrate import require_current

from . import checkpoints, deadletters, metrics
from .applier import Applier
from .bootstrap import bootstrap
from .contract import DEFAULT_ALIAS, DEFAULT_SHAPE, MAX_BATCH_AGE, IndexShape
from .elasticsearch_index import IndexMissing, MappingOutdated, check_mapping, ensure_alias
from .index_health import IndexHealth
from .leases import Leases
from .logs import log
from .partition_runner import PartitionRunner
from .read_waits import ReadWaits
from .scheduled_jobs import add_snapshot, add_verify, refresh_lag_metrics
from .search_client import open_search
from .search_engine import UnsupportedEngine
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
    ``once``, until every partition it could lease has caught up."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.consumer = config.consumer_name
        n = config.partitions
        self.coord = Coordinator.connect(
            config.database_url,
            notify=False,
            # A batch holds its snapshot transaction while Elasticsearch works.
            idle_in_transaction_timeout=MAX_BATCH_AGE + 60,
            # Its reads take arrays of ids right after bursts of writes (an import),
            # before autovacuum has analyzed them: see Settings.custom_plans.
            custom_plans=True,
            pool_size=n + 2, max_overflow=n + 4,
        )
        self.engine = self.coord.engine
        self.es = open_search(
            config.es_url, request_timeout=config.es_request_timeout, max_retries=0,
            retry_on_timeout=False, connections_per_node=max(10, 2 * n),
            **config.es_options,
        )
        self.applier = Applier(
            self.engine, self.es, config.alias,
            partial(deadletters.reject, self.engine, self.consumer),
            chunk_size=config.chunk_size,
        )
        self.leases = Leases(config.database_url, self.consumer)
        self.runners: dict[int, PartitionRunner] = {}
        self.target: int | None = None
        self._stop = threading.Event()
        self._main_wake = threading.Event()
        self._once_acquired = False
        self.crashes = 0
        self._last_lag = 0.0
        self.listener = Listener(config.database_url, self.wake_for)
        self.ready = threading.Event()
        self.index_health = IndexHealth(self.es, config.alias, self.consumer)
        self.read_waits = ReadWaits(self.consumer)

    # ------------------------------------------------------------ controls

    def stop(self) -> None:
        """Ask the worker to finish: it abandons batches in flight and returns."""
        self._stop.set()
        self._main_wake.set()

    def wake_main(self) -> None:
        self._main_wake.set()

    def wake_all(self, but: PartitionRunner | None = None) -> None:
        for r in list(self.runners.values()):
            if r is not but:
                r.wake.set()

    def wake_for(self, payload: str | None) -> None:
        """A ``pathkeeper_events`` notification: wake only the runners of the partitions
        it names (``coordinator.event_reader.notified_partitions``); everyone if it names
        none (an older writer, a hand-made NOTIFY, the listener reconnecting)."""
        wanted = notified_partitions(payload, self.config.partitions)
        if wanted is None:
            self.wake_all()
            return
        for p in wanted:
            runner = self.runners.get(p)
            if runner is not None:
                runner.wake.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log(logger, logging.INFO, "shutdown_requested", signal=signal.Signals(signum).name)
        self.stop()

    # ------------------------------------------------------------ helpers

    def _indexed_before(self) -> bool:
        with self.engine.connect() as conn:
            return any(p > 0 for p in checkpoints.load_all(conn, self.consumer).values())

    def _setup(self) -> bool:
        """Index, checkpoint layout and membership, retried until they work or stop."""
        delay = self.config.backoff_base
        while not self._stop.is_set():
            try:
                # Waiting for a database that is up but never migrated would wait forever.
                require_current(self.engine)
                # A new consumer on a compacted log: its index from nodes, first.
                bootstrap(self.coord, self.es, self.config.alias, self.consumer,
                          self.config.partitions, self._stop, self.config.index_shape)
                if self._stop.is_set():
                    return False
                index = ensure_alias(self.es, self.config.alias, indexed=self._indexed_before(),
                                     shape=self.config.index_shape or DEFAULT_SHAPE)
                check_mapping(self.es, index, self.config.alias)
                self.index_health.check_request_limit(self.config.max_content_bytes)
                checkpoints.ensure_layout(self.engine, self.consumer, self.config.partitions)
                if self.config.once:
                    self.target = wait_for_bound(self.engine, wait=60.0)
                self.leases.join()
                return True
            except IndexMissing as exc:
                metrics.INDEX_MISSING.labels(self.consumer).set(1)
                log(logger, logging.ERROR, "index_missing", alias=self.config.alias,
                    error=str(exc))
                raise
            except (checkpoints.LayoutMismatch, MappingOutdated):
                raise
            except UnsupportedEngine as exc:
                log(logger, logging.ERROR, "search_engine_unsupported", error=str(exc))
                raise
            except NotMigrated as exc:
                log(logger, logging.ERROR, "schema_not_migrated", error=str(exc))
                raise
            except Exception as exc:
                log(logger, logging.WARNING, "startup_failed", error=f"{type(exc).__name__}: {exc}",
                    retry_in=round(delay, 3))
                self._stop.wait(delay)
                delay = min(delay * 2, self.config.backoff_cap)
        return False

    def _tick(self) -> None:
        """The polling fallback (APScheduler job): wake everyone, refresh lag metrics."""
        self.wake_all()
        self._main_wake.set()
        if self.config.metrics_port is None or time.monotonic() - self._last_lag < 5.0:
            return
        self._last_lag = time.monotonic()
        refresh_lag_metrics(self.engine, self.consumer)

    def _start_runner(self, p: int) -> None:
        runner = PartitionRunner(self, p)
        self.runners[p] = runner
        runner.start()
        log(logger, logging.INFO, "partition_acquired", partition=p, consumer=self.consumer)

    def _stop_all_runners(self) -> None:
        for r in self.runners.values():
            r.request_stop()
        for r in self.runners.values():
            r.join()
        for p in list(self.runners):
            self.leases.release(p)
            log(logger, logging.INFO, "partition_released", partition=p)
        self.runners.clear()

    def _rebalance(self) -> None:
        """Keep our fair share of partitions; replace lost leases and crashed runners."""
        n = self.config.partitions
        if not self.leases.alive():
            if self.runners:
                log(logger, logging.WARNING, "leases_lost")
                self._stop_all_runners()
            try:
                self.leases.close()
                self.leases.join()
            except Exception as exc:
                log(logger, logging.WARNING, "lease_connection_failed", error=str(exc))
                return
        for p, r in list(self.runners.items()):
            if not r.alive:
                del self.runners[p]
                self.leases.release(p)
                if r.crashed is not None:
                    self.crashes += 1
                log(logger, logging.INFO, "partition_released", partition=p)
        if self.config.once:
            if not self._once_acquired:
                self._once_acquired = True
                for p in range(n):
                    if self.leases.try_acquire(p):
                        self._start_runner(p)
                    else:
                        log(logger, logging.WARNING, "partition_busy_skipped", partition=p)
            return
        share = math.ceil(n / self.leases.members())
        active = sorted(p for p, r in self.runners.items() if not r.stopping)
        for p in active[share:]:
            self.runners[p].request_stop()  # released once its batch is done
        active = active[:share]
        slot = self.leases.slot or 0
        for k in range(n):
            if len(active) >= share:
                break
            p = (slot * share + k) % n
            if p in self.runners:
                continue
            if self.leases.try_acquire(p):
                self._start_runner(p)
                active.append(p)
        metrics.PARTITIONS_HELD.labels(self.consumer).set(len(self.runners))

    # ------------------------------------------------------------ main loop

    def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            # The worker process (not a worker in someone else's thread): a subtree
            # lane turning rows into bulk bodies holds the GIL for up to the switch
            # interval (5 ms) each time a node lane's reply arrives; a node-lane batch
            # waits on ~15 replies. 0.5 ms keeps that wait out of file-rename latency.
            sys.setswitchinterval(0.0005)
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
                slot=self.leases.slot, once=self.config.once, target=self.target)
            self.listener.start()
            scheduler.add_job(
                self._tick, "interval", seconds=self.config.poll_interval,
                max_instances=1, coalesce=True, id="poll",
            )
            if self.config.verify_cron:
                add_verify(scheduler, self.coord, self.es, self.config.alias, self.consumer,
                           self.config.verify_cron)
            if self.config.snapshot_cron:
                add_snapshot(scheduler, self.engine, self.config.snapshot_cron,
                             self.config.compact_retain)
            scheduler.start()
            while not self._stop.is_set():
                try:
                    self._rebalance()
                except psycopg.Error as exc:
                    # The lease connection broke between alive() and the next lease query
                    # (server restart, pg_terminate_backend): the next round sees it closed
                    # and rejoins, instead of the whole worker stopping.
                    log(logger, logging.WARNING, "lease_connection_failed", error=str(exc))
                self.ready.set()
                if self.config.once and not self.runners:
                    break
                self._main_wake.wait(self.config.poll_interval)
                self._main_wake.clear()
            if self.config.once and self.crashes:
                code = 1
        finally:
            if scheduler.running:
                scheduler.shutdown(wait=False)
            self._stop_all_runners()
            self.listener.stop()
            self.leases.close()
            self.es.close()
            self.coord.close()
            if stop_metrics is not None:
                stop_metrics()
            log(logger, logging.INFO, "worker_stopped", consumer=self.consumer)
        return code
