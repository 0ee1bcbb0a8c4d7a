"""The worker's hold on one shard (one PostgreSQL server of the shard map): its own pool,
lease connection, LISTEN connection, checkpoints and partition runners.

Each shard keeps today's log protocol (docs/sharding.md, section 2), so each is run as a
whole worker used to run its one server: partitions ``0 .. N-1`` of that shard's log are
leased with advisory locks on that shard's server (a dead worker's leases there are freed
by that server), its notifications wake only its runners, and its checkpoints live in its
``checkpoints`` table. Positions of two shards are never compared. What the shards share
is the worker around them: the configuration, the search client, the one index.

A shard that is down does not hold up the others: its setup is retried with its own
backoff (``ShardWork.due``), its runners back off and retry as after any error, and a
lost lease connection gives up that shard's partitions only.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from functools import partial
from typing import Any, Protocol

from coordinator import Coordinator
from coordinator.event_reader import notified_partitions, wait_for_bound
from coordinator.migrate import require_current
from coordinator.shard_map import Shard

from . import checkpoints, deadletters
from .applier import Applier
from .bootstrap import bootstrap, needs_bootstrap
from .contract import DEFAULT_SHAPE, MAX_BATCH_AGE, IndexShape
from .elasticsearch_index import check_mapping, ensure_alias
from .errors import IndexerError
from .index_health import IndexHealth
from .leases import Leases
from .logs import log
from .partition_runner import PartitionRunner, RunnerConfig
from .read_waits import ReadWaits
from .search_engine import SearchEngine
from .wakeup import Listener


class ShardConfig(RunnerConfig, Protocol):
    """What a shard's part reads of the worker's configuration (``worker.WorkerConfig``)."""

    @property
    def chunk_size(self) -> int: ...
    @property
    def index_shape(self) -> IndexShape | None: ...


class ShardHost(Protocol):
    """What a shard's part uses of its worker (``worker.Worker``): declared here so the
    worker imports this module and nothing here imports the worker."""

    @property
    def config(self) -> ShardConfig: ...
    @property
    def consumer(self) -> str: ...
    @property
    def es(self) -> SearchEngine: ...
    @property
    def index_health(self) -> IndexHealth: ...

    def wake_main(self) -> None: ...

logger = logging.getLogger("pathkeeper.indexer")


class ShardNeedsRebuild(IndexerError):
    """A shard's log was compacted before this consumer indexed anything from it, and the
    index holds other shards' documents: building it from that shard's nodes alone (what
    a worker of one server does) would drop theirs."""


class ShardWork:
    """One shard's part of a worker. Its fields are what a ``PartitionRunner`` reads
    (``config``, ``coord``, ``engine``, ``consumer``, ``applier``, ...), so a runner is
    today's, built on one shard."""

    def __init__(self, worker: ShardHost, shard: Shard, label_prefix: str) -> None:
        config = worker.config
        self.worker = worker
        self.shard = shard
        self.config: ShardConfig = config
        self.consumer = worker.consumer
        self.index_health = worker.index_health
        #: Metric labels of this shard's partitions: ``"3"`` with one shard, else ``"pg2/3"``.
        self.label_prefix = label_prefix
        #: Log fields naming the shard: none with one shard (one server's lines as they were).
        self.where: dict[str, Any] = {"shard": shard.name} if label_prefix else {}
        n = config.partitions
        url = shard.database_url()  # an ``env:NAME`` URL is read here, once
        self.coord = Coordinator.connect(
            url,
            notify=False,
            # A batch holds its snapshot transaction while Elasticsearch works.
            idle_in_transaction_timeout=MAX_BATCH_AGE + 60,
            # Its reads take arrays of ids right after bursts of writes (an import),
            # before autovacuum has analyzed them: see Settings.custom_plans.
            custom_plans=True,
            pool_size=n + 2, max_overflow=n + 4,
        )
        self.engine = self.coord.engine
        self.applier = Applier(
            self.engine, worker.es, config.alias,
            partial(deadletters.reject, self.engine, self.consumer),
            chunk_size=config.chunk_size,
        )
        self.leases = Leases(url, self.consumer)
        self.listener = Listener(url, self.wake_for)
        self.read_waits = ReadWaits(self.consumer, label_prefix)
        self.runners: dict[int, PartitionRunner] = {}
        #: ``--once``: the position of this shard's log to catch up with.
        self.target: int | None = None
        #: Set up (schema checked, checkpoints laid out, joined as a member).
        self.ready = False
        self._once_acquired = False
        self._next_setup = 0.0
        self._setup_delay = config.backoff_base

    # ------------------------------------------------------------ what runners call

    def label(self, partition: int) -> str:
        return f"{self.label_prefix}{partition}"

    def wake_all(self, but: PartitionRunner | None = None) -> None:
        """Wake this shard's runners (positions of other shards say nothing about ours)."""
        for r in list(self.runners.values()):
            if r is not but:
                r.wake.set()

    def wake_main(self) -> None:
        self.worker.wake_main()

    def wake_for(self, payload: str | None) -> None:
        """A ``pathkeeper_events`` notification from this shard: wake only the runners of
        the partitions it names (``coordinator.event_reader.notified_partitions``);
        everyone of this shard if it names none (an older writer, a hand-made NOTIFY, the
        listener reconnecting)."""
        wanted = notified_partitions(payload, self.config.partitions)
        if wanted is None:
            self.wake_all()
            return
        for p in wanted:
            runner = self.runners.get(p)
            if runner is not None:
                runner.notified()

    # ------------------------------------------------------------ setup

    def indexed_before(self) -> bool:
        with self.engine.connect() as conn:
            return any(p > 0 for p in checkpoints.load_all(conn, self.consumer).values())

    def setup(self, stop: threading.Event, several: bool) -> bool:
        """Schema, bootstrap, index, checkpoint layout and membership on this shard; False
        if ``stop`` was set meanwhile. Raises what the caller retries or gives up on."""
        cfg = self.config
        # Waiting for a database that is up but never migrated would wait forever.
        require_current(self.engine)
        if several:
            horizon = needs_bootstrap(self.coord, self.consumer)
            if horizon:
                raise ShardNeedsRebuild(
                    f"shard {self.shard.name}: the event log was compacted (to {horizon}) "
                    f"before consumer {self.consumer!r} indexed anything from it; run "
                    "`pathkeeper reindex` over all shards, then start the worker")
        else:
            # A new consumer on a compacted log: its index from nodes, first.
            bootstrap(self.coord, self.worker.es, cfg.alias, self.consumer, cfg.partitions,
                      stop, cfg.index_shape)
        if stop.is_set():
            return False
        index = ensure_alias(self.worker.es, cfg.alias, indexed=self.indexed_before(),
                             shape=cfg.index_shape or DEFAULT_SHAPE)
        check_mapping(self.worker.es, index, cfg.alias)
        checkpoints.ensure_layout(self.engine, self.consumer, cfg.partitions)
        if cfg.once:
            self.target = wait_for_bound(self.engine, wait=60.0)
        self.leases.join()
        self.ready = True
        self.listener.start()
        return True

    def due(self) -> bool:
        """Whether a setup that failed may be tried again now."""
        return time.monotonic() >= self._next_setup

    def retry_in(self) -> float:
        """Seconds until ``due``."""
        return max(0.0, self._next_setup - time.monotonic())

    def setup_failed(self, exc: BaseException) -> float:
        """Back off the next try; returns the delay."""
        delay = self._setup_delay
        self._next_setup = time.monotonic() + delay
        self._setup_delay = min(delay * 2, self.config.backoff_cap)
        return delay

    # ------------------------------------------------------------ leases

    def _start_runner(self, p: int) -> None:
        runner = PartitionRunner(self, p)
        self.runners[p] = runner
        runner.start()
        log(logger, logging.INFO, "partition_acquired", partition=p, **self.where,
            consumer=self.consumer)

    def stop_all_runners(self) -> None:
        for r in self.runners.values():
            r.request_stop()
        for r in self.runners.values():
            r.join()
        for p in list(self.runners):
            self.leases.release(p)
            log(logger, logging.INFO, "partition_released", partition=p,
                **self.where)
        self.runners.clear()

    def rebalance(self) -> int:
        """Keep our fair share of this shard's partitions; replace lost leases and crashed
        runners. Returns how many runners crashed since the last call."""
        n = self.config.partitions
        crashes = 0
        if not self.leases.alive():
            if self.runners:
                log(logger, logging.WARNING, "leases_lost", **self.where)
                self.stop_all_runners()
            try:
                self.leases.close()
                self.leases.join()
            except Exception as exc:
                log(logger, logging.WARNING, "lease_connection_failed",
                    **self.where, error=str(exc))
                return 0
        for p, r in list(self.runners.items()):
            if not r.alive:
                del self.runners[p]
                self.leases.release(p)
                if r.crashed is not None:
                    crashes += 1
                log(logger, logging.INFO, "partition_released", partition=p,
                    **self.where)
        if self.config.once:
            if not self._once_acquired:
                self._once_acquired = True
                for p in range(n):
                    if self.leases.try_acquire(p):
                        self._start_runner(p)
                    else:
                        log(logger, logging.WARNING, "partition_busy_skipped", partition=p,
                            **self.where)
            return crashes
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
        return crashes

    def close(self) -> None:
        self.stop_all_runners()
        self.listener.stop()
        self.leases.close()
        self.coord.close()
