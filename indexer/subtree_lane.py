"""A partition's subtree lane: subtree rewrites and sweeps in a thread of their own,
and the priority that lets the node lane's small requests go before its bulk ones.

The node lane (``indexer.partition_runner``) hands each batch's ``SubtreeWork`` over
once the batch's nodes are acknowledged; why the two lanes may run side by side is
``indexer.applier``'s rule (external versions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from . import metrics
from .applier import Applier, SubtreeWork
from .bulk import IN_FLIGHT
from .index_health import IndexHealth
from .logs import log

logger = logging.getLogger("pathkeeper.indexer")


class NodeLanePriority:
    """Lets the node lane's small batches go before the subtree lane's bulk requests.

    Both lanes share the process (the GIL), the PostgreSQL pool and the search server's
    write threads; a subtree lane's bulk request in flight makes a 20-document one
    wait. So the node lane counts its requests in flight, and the subtree lane,
    between two of its bulk requests, waits while any is (at most ``cap`` seconds,
    so a steady stream of small batches cannot starve it: the node lane's reads,
    which wait on PostgreSQL, leave it room anyway)."""

    def __init__(self, cap: float = 0.25, quiet: float = 0.2) -> None:
        self.cap = cap
        self.quiet = quiet
        self._cond = threading.Condition()
        self._busy = 0  # node-lane requests in flight (the lane pipelines them)
        self._last_sent = float("-inf")  # when the node lane last sent a request

    def busy(self) -> None:
        with self._cond:
            self._busy += 1
            self._last_sent = time.monotonic()

    def idle(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def wait_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._busy <= 0, timeout=self.cap)

    def subtree_requests(self, since: float = float("-inf")) -> int:
        """How many bulk requests the subtree lane may keep in flight now:
        ``bulk.IN_FLIGHT`` while the node lane is quiet (no request of its own in flight,
        nor sent in the last ``quiet`` seconds after ``since``, the pass's start: the
        request that handed a lone directory rename over does not count), else one, so
        one of the search server's two write threads stays free for the node lane's next
        small request (a rename-heavy load)."""
        with self._cond:
            recent = time.monotonic() - self._last_sent <= self.quiet
            quiet = self._busy <= 0 and not (recent and self._last_sent >= since)
        return IN_FLIGHT if quiet else 1


class LaneWorker(Protocol):
    """What a lane uses of its runner's worker."""

    @property
    def consumer(self) -> str: ...
    @property
    def applier(self) -> Applier: ...
    @property
    def index_health(self) -> IndexHealth: ...


class LaneRunner(Protocol):
    """What a lane uses of the partition's runner (``partition_runner.PartitionRunner``):
    declared here so the runner imports its lane and nothing here imports the runner."""

    crashed: BaseException | None

    @property
    def worker(self) -> LaneWorker: ...
    @property
    def partition(self) -> int: ...
    @property
    def stop(self) -> threading.Event: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def priority(self) -> NodeLanePriority: ...

    def _retrying(self, fn: Callable[[], Any], default: Any) -> Any: ...

    def publish_checkpoint(self) -> None: ...

    def request_stop(self) -> None: ...


class SubtreeLane:
    """The second lane of a partition: subtree rewrites and sweeps, in a thread of
    their own, so a 10,000-document rename never holds back the next file rename.

    The node lane (``PartitionRunner``) hands over a batch's ``SubtreeWork`` after
    writing its nodes; work that arrives while the lane is busy is merged into one
    (``SubtreeWork.merge``): a directory renamed five times meanwhile is rewritten
    once, and the lane pays at most one refresh and one sweep for all of it. The lane
    applies merged work strictly in batch order, and ``holds_back`` tells the runner how far
    its checkpoint may go: not past the batch before the oldest work not yet done.
    """

    #: Stop reading ahead (node lane waits) while this many batches wait here: bounds
    #: the memory of merged work and how far the checkpoint can fall behind reads.
    MAX_PENDING_BATCHES = 1000
    #: Bulk actions per request of this lane. Each request holds one of the search
    #: server's write threads (two on two cores) while the node lane's small requests
    #: wait for one; measured (bench_rename_load.py --rate 224, real Elasticsearch, 5-6
    #: runs each, alternated): 500 against 1,000 took the p99 of "file rename returned
    #: -> worker's bulk acknowledged" from 215 to 165 ms (median), busy / ideal the
    #: same (1.08-1.11), and flat out still caught up within 5 s. With 250 (on a box
    #: loaded by other sessions) the lane fell to ~900 documents/s under file renames.
    #: A pass keeps up to ``bulk.IN_FLIGHT`` of these in flight (``NodeLanePriority``).
    CHUNK_SIZE = 500

    def __init__(self, runner: LaneRunner) -> None:
        self.runner = runner
        self._cond = threading.Condition()
        self._pending: SubtreeWork | None = None  # handed over, not started
        self._active: SubtreeWork | None = None  # being applied
        self._thread = threading.Thread(
            target=self._run, name=f"indexer-p{runner.partition}-subtrees", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def submit(self, work: SubtreeWork) -> None:
        with self._cond:
            while (
                self._pending is not None
                and self._pending.batches >= self.MAX_PENDING_BATCHES
                and not self.runner.stopping
            ):
                self._cond.wait(0.5)
            self._pending = work if self._pending is None else self._pending.merge(work)
            self._cond.notify_all()

    def holds_back(self) -> int | None:
        """The checkpoint may not pass this position (None: nothing outstanding)."""
        with self._cond:
            work = self._active or self._pending
            return None if work is None else work.after

    def _take(self) -> SubtreeWork | None:
        """The work to apply next: what is active (a retry), plus anything handed over
        since, merged. None once the runner stops."""
        with self._cond:
            while self._active is None and self._pending is None:
                if self.runner.stopping:
                    return None
                self._cond.wait(0.5)
            if self._active is None:
                self._active, self._pending = self._pending, None
            elif self._pending is not None:
                self._active, self._pending = self._active.merge(self._pending), None
            self._cond.notify_all()
            return self._active

    def _apply_once(self) -> bool:
        w = self.runner.worker
        work = self._take()
        if work is None:
            return False
        started = time.monotonic()
        stats = w.applier.apply_subtrees(
            work, self.runner.stop, chunk_size=self.CHUNK_SIZE,
            yield_to=self.runner.priority.wait_idle,
            in_flight=partial(self.runner.priority.subtree_requests, time.monotonic()),
        )
        seconds = time.monotonic() - started
        metrics.BATCH_SECONDS.labels(w.consumer).observe(seconds)
        metrics.count_documents(w.consumer, stats)
        w.index_health.index_answered(stats)
        log(logger, logging.INFO, "subtrees_applied", partition=self.runner.partition,
            batches=work.batches, after=work.after, cursor=work.cursor,
            moves=sum(len(n.moves) for n in work.namespaces.values()),
            sweeps=work.swept,
            indexed=stats.indexed, deleted=stats.deleted,
            already_newer=stats.already_newer, rejected=stats.rejected,
            rewrite_seconds=round(work.timings.get("rewrite", 0.0), 4),
            rewrite_requests=int(work.timings.get("requests", 0)),
            rewrite_es_took=round(work.timings.get("es_took", 0.0), 4),
            refresh_seconds=round(work.timings.get("refresh", 0.0), 4),
            sweep_seconds=round(work.timings.get("sweep", 0.0), 4),
            seconds=round(seconds, 4))
        with self._cond:
            self._active = None
            self._cond.notify_all()
        self.runner.publish_checkpoint()
        return True

    def _run(self) -> None:
        try:
            while not self.runner.stopping:
                if not self.runner._retrying(self._apply_once, default=False):
                    return
        except BaseException as exc:  # a bug: stop the runner, the dispatcher restarts it
            self.runner.crashed = exc
            log(logger, logging.ERROR, "subtree_lane_crashed", exc_info=True,
                partition=self.runner.partition)
            self.runner.request_stop()

