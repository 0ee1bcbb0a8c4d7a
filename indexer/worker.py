"""The indexer worker process: leases partitions, reads the event log, applies batches.

How a change reaches Elasticsearch (``indexer.applier`` has the batch rules and
why they are safe):

1. Namespaces are split into ``N`` partitions by a hash of their name
   (``coordinator.eventlog.Partition``). A worker holds a partition with a
   session advisory lock on a dedicated connection (``indexer.leases``): it dies
   with the process, so a ``kill -9``'d worker's partitions are free at once.
   Workers count each other and each takes its fair share; an idle worker keeps
   trying to grab free partitions.
2. Each held partition has its own runner (``PartitionRunner``), so a huge batch
   holds up only the namespaces of its partition, and each runner has two lanes:
   the *node lane* (its thread) reads a batch with
   ``read_events(after=read_cursor, partition=...)``, which returns whole
   transactions in a gap-safe order and a cursor, writes the documents of the
   nodes the events name (``Applier.read_nodes`` / ``send_nodes``, one per event
   at most; the request goes out from a sender thread while the lane reads the
   next batch, two requests in flight at most) and, once Elasticsearch
   acknowledged it, hands the batch's subtree rewrites and sweeps to the *subtree lane*
   (``SubtreeLane``, a second thread), which merges whatever piles up while it
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

Deleted-then-recreated and ``index.gc_deletes``: see ``indexer.applier``.
"""

from __future__ import annotations

import logging
import math
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from types import FrameType
from typing import Any

import psycopg

from coordinator import Coordinator, paths
from coordinator.errors import CursorExpired, NotMigrated
from coordinator.event_reader import (
    Partition,
    notified_partitions,
    wait_for_bound,
)
from coordinator.event_reader import (
    WriterInFlight as Writer,
)
from coordinator.indexing import consumer_for, wait_indexed
from coordinator.migrate import require_current
from coordinator.results import Event

from . import checkpoints, deadletters, metrics, status
from .applier import Abandoned, Applier, NodeActions, SubtreeWork
from .bootstrap import bootstrap
from .bulk import BulkStats, Rejected
from .contract import DEFAULT_ALIAS, MAX_BATCH_AGE
from .elasticsearch_index import (
    IndexMissing,
    MappingOutdated,
    alias_targets,
    check_mapping,
    content_limit_problem,
    ensure_alias,
    missing_alias_message,
    our_indices,
    request_limit,
)
from .leases import Leases
from .logs import log
from .plan import plan_batch
from .search_client import open_search
from .search_engine import SearchRefused, UnsupportedEngine
from .wakeup import Listener

logger = logging.getLogger("pathkeeper.indexer")
#: How long a scheduled verify waits for this worker to apply recent events before it
#: counts what still differs as drift.
VERIFY_SETTLE_SECONDS = 30.0


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

    @property
    def consumer_name(self) -> str:
        return consumer_for(self.alias, self.consumer)


class NodeLanePriority:
    """Lets the node lane's small batches go before the subtree lane's bulk requests.

    Both lanes share the process (the GIL), the PostgreSQL pool and the search server's
    write threads; a subtree lane's bulk request in flight makes a 20-document one
    wait. So the node lane counts its requests in flight, and the subtree lane,
    between two of its bulk requests, waits while any is (at most ``cap`` seconds,
    so a steady stream of small batches cannot starve it: the node lane's reads,
    which wait on PostgreSQL, leave it room anyway)."""

    def __init__(self, cap: float = 0.25) -> None:
        self.cap = cap
        self._cond = threading.Condition()
        self._busy = 0  # node-lane requests in flight (the lane pipelines them)

    def busy(self) -> None:
        with self._cond:
            self._busy += 1

    def idle(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def wait_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._busy <= 0, timeout=self.cap)


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
    CHUNK_SIZE = 500

    def __init__(self, runner: PartitionRunner) -> None:
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
        )
        seconds = time.monotonic() - started
        metrics.BATCH_SECONDS.labels(w.consumer).observe(seconds)
        _count_documents(w.consumer, stats)
        w.index_answered(stats)
        log(logger, logging.INFO, "subtrees_applied", partition=self.runner.partition,
            batches=work.batches, after=work.after, cursor=work.cursor,
            moves=sum(len(n.moves) for n in work.namespaces.values()),
            sweeps=work.swept,
            indexed=stats.indexed, deleted=stats.deleted,
            already_newer=stats.already_newer, rejected=stats.rejected,
            rewrite_seconds=round(work.timings.get("rewrite", 0.0), 4),
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


def _count_documents(consumer: str, stats: BulkStats) -> None:
    for outcome in ("indexed", "deleted", "already_newer", "rejected", "overridden"):
        n = getattr(stats, outcome)
        if n:
            metrics.DOCUMENTS.labels(consumer, outcome).inc(n)


@dataclass
class _NodeBatch:
    """A node-lane batch read and handed to a sender thread, not yet settled."""

    after: int  # the read cursor before it
    cursor: int
    events: int
    version: int
    work: SubtreeWork | None  # its subtree part, handed to the lane once the nodes are in
    future: Future[BulkStats] | None  # None: nothing to write (the read only moved on)
    timings: dict[str, float]
    started: float
    in_flight: int  # node-lane requests already in flight when it was sent


class PartitionRunner:
    """Applies one partition's events, in order: the node lane in its own thread,
    subtrees and sweeps in the partition's ``SubtreeLane``.

    The node lane pipelines: while batch N's bulk request is in flight (a sender
    thread), it reads batch N+1 and fetches its nodes, and sends that too (at most
    ``node_bulks_in_flight`` requests). A file rename then waits for one read, one
    fetch and one request, not also for the rest of the request before it. Safe
    because every write carries an external version from a snapshot taken after
    its batch was read (``indexer.applier``): the two requests may be applied in
    either order. What is ordered is the bookkeeping: batches are settled strictly
    in read order (``_settle``): a batch's subtree work goes to the lane, and
    ``acked_cursor`` (what the checkpoint may reach) moves past it, only once its
    request and every earlier one were acknowledged. If any request fails, the ones
    after it are waited for and forgotten and the lane reads again from
    ``acked_cursor``: what they wrote is written again, at the same or higher
    versions (the batches read again may end elsewhere), so never backwards."""

    def __init__(self, worker: Worker, partition: int) -> None:
        self.worker = worker
        self.partition = partition
        self.label = str(partition)
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.crashed: BaseException | None = None
        #: What is saved: every event up to it is fully applied (both lanes).
        self.checkpoint = 0
        #: When the current run of held-back reads began (None: not held back).
        self._held_since: float | None = None
        self._held_this_read = False
        #: Where the node lane reads on from (>= acked_cursor).
        self.read_cursor = 0
        #: Every event up to it has its nodes acknowledged by Elasticsearch and its
        #: subtree work handed to the lane (>= checkpoint).
        self.acked_cursor = 0
        self._in_flight: deque[_NodeBatch] = deque()
        self._sender = ThreadPoolExecutor(
            max_workers=max(1, worker.config.node_bulks_in_flight),
            thread_name_prefix=f"indexer-p{partition}-send",
        )
        self._checkpoint_lock = threading.Lock()
        self.lane = SubtreeLane(self)
        self.priority = NodeLanePriority()
        self._thread = threading.Thread(
            target=self._run, name=f"indexer-p{partition}", daemon=True
        )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        self.stop.set()
        self.wake.set()
        self.lane.wake()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        w = self.worker
        try:
            self.checkpoint = self._retrying(self._load_checkpoint, default=-1)
            if self.checkpoint < 0:
                return
            self.read_cursor = self.acked_cursor = self.checkpoint
            metrics.CHECKPOINT.labels(w.consumer, self.label).set(self.checkpoint)
            self.lane.start()
            while not self.stop.is_set():
                self.wake.clear()
                progressed = self._retrying(self._step, default=False)
                if w.config.once and w.target is not None and self.checkpoint >= w.target:
                    return
                if not progressed:
                    self.wake.wait()
        except BaseException as exc:  # a bug: the dispatcher logs it and restarts us
            self.crashed = exc
            log(logger, logging.ERROR, "partition_runner_crashed", exc_info=True,
                partition=self.partition)
        finally:
            # The lease is released once we are not alive: the node lane's requests in
            # flight and the subtree lane must be done first.
            self.request_stop()
            self._sender.shutdown(wait=True)
            self.lane.join()
            w.wake_main()

    def _load_checkpoint(self) -> int:
        with self.worker.engine.connect() as conn:
            return checkpoints.load(conn, self.worker.consumer, self.partition)

    def _retrying(self, fn: Callable[[], Any], default: Any) -> Any:
        """Run ``fn`` until it succeeds, backing off after errors; ``default`` on stop."""
        w = self.worker
        attempt = 0
        while not self.stop.is_set():
            try:
                result = fn()
                if attempt:
                    # Recovered; but a step that does not write (a read of the log) can
                    # succeed while the index is still gone: ask the server, not the step.
                    w.check_index()
                return result
            except Abandoned as exc:
                log(logger, logging.INFO, "batch_abandoned", partition=self.partition,
                    reason=str(exc))
                continue
            except Exception as exc:
                attempt += 1
                delay = min(w.config.backoff_cap, w.config.backoff_base * 2**attempt)
                delay *= 0.5 + random.random() / 2
                metrics.BATCH_RETRIES.labels(w.consumer, self.label).inc()
                log(logger, logging.WARNING, "batch_failed", partition=self.partition,
                    checkpoint=self.checkpoint, attempt=attempt, retry_in=round(delay, 3),
                    error=f"{type(exc).__name__}: {exc}")
                self.stop.wait(delay)
                w.check_index()
        return default

    def _held_back(self, started: float, writers: list[Writer]) -> None:
        """``read_events`` has waited ``read_report_after`` seconds for ``writers``."""
        self._held_this_read = True
        if self._held_since is None:
            self._held_since = started
        self.worker.report_held_back(self.partition, time.monotonic() - self._held_since,
                                     writers)

    def _read(self) -> tuple[list[Event], int]:
        w = self.worker
        started = time.monotonic()
        self._held_this_read = False
        try:
            out = w.coord.read_events(
                after=self.read_cursor, limit=w.config.batch_events,
                partition=Partition(self.partition, w.config.partitions),
                wait=w.config.read_wait, on_slow=partial(self._held_back, started),
                report_after=w.config.read_report_after,
                contents=False,  # documents are built from PostgreSQL's rows
            )
        except CursorExpired as exc:
            if not self._adopt_rebuilt_checkpoint(exc):
                raise  # backed off and retried: a rebuild may move the checkpoint meanwhile
            return [], self.read_cursor
        if not self._held_this_read and self._held_since is not None:
            self.worker.report_resumed(self.partition, time.monotonic() - self._held_since)
            self._held_since = None
        return out

    def _adopt_rebuilt_checkpoint(self, exc: CursorExpired) -> bool:
        """Our cursor is below the compaction horizon. If a rebuild has since moved the
        saved checkpoint past it (the rebuilt index holds every event up to there),
        read on from it and say True; else log the command that does that."""
        from .retention import rebuild_command

        saved = self._load_checkpoint()
        if saved >= exc.horizon and saved > self.read_cursor:
            log(logger, logging.WARNING, "checkpoint_moved_by_rebuild",
                partition=self.partition, cursor=self.read_cursor, checkpoint=saved)
            with self._checkpoint_lock:
                self.checkpoint = max(self.checkpoint, saved)
            self.read_cursor = saved
            metrics.CHECKPOINT.labels(self.worker.consumer, self.label).set(self.checkpoint)
            return True
        cfg = self.worker.config
        log(logger, logging.ERROR, "cursor_expired", partition=self.partition,
            cursor=exc.cursor, horizon=exc.horizon,
            error="the events after this partition's checkpoint were compacted away",
            fix=f"run `{rebuild_command(cfg.alias, cfg.consumer)}`: it rebuilds the index "
                "and moves this consumer's checkpoints to it; this worker then reads on")
        return False

    def publish_checkpoint(self) -> None:
        """Save the checkpoint as far as both lanes allow (and wake ``wait_indexed``).

        The node lane has applied everything up to ``acked_cursor``; the subtree lane
        everything before the first batch of its oldest outstanding work. The saved
        checkpoint is the smaller, so ``wait_indexed(seq)`` still means every event
        ``<= seq`` is fully in the index, subtrees included, and a restart re-reads
        every batch whose subtree work was not finished (its documents already
        written answer 409: ``indexer.applier``)."""
        w = self.worker
        with self._checkpoint_lock:
            hold = self.lane.holds_back()
            acked = self.acked_cursor
            target = acked if hold is None else min(acked, hold)
            if target <= self.checkpoint:
                return
            checkpoints.save(w.engine, w.consumer, self.partition, target)
            self.checkpoint = target
            metrics.CHECKPOINT.labels(w.consumer, self.label).set(target)
        if w.config.once:
            self.wake.set()  # the node lane re-checks whether it is done

    def _step(self) -> bool:
        """Settle the node-lane requests that were answered, then read the next batch,
        fetch its nodes and send them (with the pipeline full, wait for the oldest
        request first); True if anything moved.

        No cut at directory moves: a batch is whatever ``read_events`` returns, and
        its subtrees cost the node lane nothing but a hand-over."""
        w = self.worker
        settled = self._settle(block=False)
        if len(self._in_flight) >= max(1, w.config.node_bulks_in_flight):
            return self._settle(block=True) or settled
        read_started = time.monotonic()
        read_at = time.time()
        events, cursor = self._read()
        if cursor <= self.read_cursor:
            # Nothing new: the runner waits for a wake-up, which a notification or an
            # answer to a request in flight (its done callback) gives.
            return settled
        after = self.read_cursor
        if not events:  # only holes: the cursor moves once the batches before are settled
            self._in_flight.append(_NodeBatch(after, cursor, 0, 0, None, None, {},
                                              read_started, 0))
            self.read_cursor = cursor
            self._settle(block=False)
            # Only other partitions' events: read again when woken (a notification for
            # this partition, another runner's read, the poll), not at once, or a partition
            # with no events of its own chases a busy log in a loop of reads and checkpoint
            # writes that takes the database's CPU from the partitions that have work.
            # (--once keeps reading until it reaches its target.)
            return w.config.once
        # Partitions with nothing of their own read too, so their checkpoints keep up with
        # this one's (``wait_indexed`` waits for every partition).
        w.wake_all(but=self)
        version = events[-1].position
        plan = plan_batch(events)
        timings: dict[str, float] = {"read": time.monotonic() - read_started, "read_at": read_at}
        nodes = w.applier.read_nodes(plan, version, self.stop, timings)
        work = SubtreeWork.from_plan(plan, after=after, cursor=cursor, version=version)
        self.priority.busy()
        in_flight = sum(1 for b in self._in_flight if b.future is not None)
        try:
            future = self._sender.submit(self._send_nodes, nodes, timings)
        except BaseException:
            self.priority.idle()
            raise
        future.add_done_callback(lambda _: self.wake.set())
        self._in_flight.append(_NodeBatch(
            after, cursor, len(events), version, None if work.empty else work, future,
            timings, read_started, in_flight,
        ))
        self.read_cursor = cursor
        self._settle(block=False)
        return True

    def _send_nodes(self, nodes: NodeActions, timings: dict[str, float]) -> BulkStats:
        """A sender thread: one batch's node documents to Elasticsearch."""
        try:
            return self.worker.applier.send_nodes(nodes, self.stop, timings)
        finally:
            self.priority.idle()

    def _settle(self, block: bool) -> bool:
        """Settle answered batches, oldest first, stopping at the first one still in
        flight (``block``: wait for that one first). A failed request drops every
        batch after it too and sends the node lane back to ``acked_cursor``, then
        raises (``_retrying`` backs off and goes on). True if any batch was settled."""
        settled = False
        while self._in_flight:
            head = self._in_flight[0]
            stats = BulkStats()
            if head.future is not None:
                if not (block or head.future.done()):
                    break
                try:
                    stats = head.future.result()
                except BaseException:
                    self._drop_in_flight()
                    raise
            block = False
            self._in_flight.popleft()
            if head.work is not None:
                # Handed over BEFORE acked_cursor moves: publish_checkpoint always sees
                # either the old cursor or this work holding the checkpoint back.
                self.lane.submit(head.work)
            self.acked_cursor = head.cursor
            settled = True
            if head.future is not None:
                self._log_batch(head, stats)
                self.worker.index_answered(stats)
        if settled:
            self.publish_checkpoint()
        return settled

    def _drop_in_flight(self) -> None:
        """Forget every batch not settled (after waiting for their requests: nothing of
        them may still be on its way once the lane reads them again)."""
        for batch in self._in_flight:
            if batch.future is not None:
                wait([batch.future])
        self._in_flight.clear()
        self.read_cursor = self.acked_cursor

    def _log_batch(self, batch: _NodeBatch, stats: BulkStats) -> None:
        w = self.worker
        seconds = time.monotonic() - batch.started
        t = batch.timings
        metrics.EVENTS_APPLIED.labels(w.consumer, self.label).inc(batch.events)
        metrics.BATCH_SECONDS.labels(w.consumer).observe(seconds)
        _count_documents(w.consumer, stats)
        # The wall-clock stamps (epoch seconds) let a benchmark place each event of the
        # batch on a timeline: read started, request sent, acknowledged, settled.
        log(logger, logging.INFO, "batch_applied", partition=self.partition,
            events=batch.events, version=batch.version, after=batch.after, cursor=batch.cursor,
            indexed=stats.indexed, deleted=stats.deleted,
            already_newer=stats.already_newer, rejected=stats.rejected,
            overridden=stats.overridden, subtree_work=batch.work is not None,
            read_seconds=round(t.get("read", 0.0), 4),
            nodes_seconds=round(t.get("read_nodes", 0.0), 4),
            bulk_seconds=round(t.get("bulk", 0.0), 4),
            es_took_seconds=round(t.get("es_took", 0.0), 4),
            in_flight=batch.in_flight, seconds=round(seconds, 4),
            read_at=round(t.get("read_at", 0.0), 4), sent_at=round(t.get("sent_at", 0.0), 4),
            acked_at=round(t.get("acked_at", 0.0), 4), settled_at=round(time.time(), 4))


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
            self.engine, self.es, config.alias, self._reject, chunk_size=config.chunk_size
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
        # Writers in flight that hold back each partition's reader, and what is exported.
        self._held_lock = threading.Lock()
        self._held: dict[int, list[Writer]] = {}
        self._held_logged: dict[int, tuple[frozenset[str], float]] = {}
        self._held_exported: set[tuple[str, str]] = set()

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
        it names (``coordinator.eventlog.notified_partitions``); everyone if it names
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

    def _check_request_limit(self) -> None:
        """Warn when a file the writers accept may not fit in one request to the search
        server. A server that does not let us read its settings only gets a note."""
        try:
            limit = request_limit(self.es)
        except SearchRefused as exc:
            log(logger, logging.WARNING, "search_server_limit_unknown",
                error=f"{type(exc).__name__}: {exc}")
            return
        problem = content_limit_problem(limit, self.config.max_content_bytes)
        if problem is not None:
            log(logger, logging.WARNING, "content_limit_exceeds_search_server",
                max_content_bytes=self.config.max_content_bytes,
                search_server_limit=limit, problem=problem)

    def _reject(self, rejected: Rejected) -> None:
        metrics.DEAD_LETTERS.labels(self.consumer).inc()
        if rejected.too_large:
            # The search server's limit, not a broken document: a warning, and the
            # partition goes on (``indexer.bulk``: halving isolated this one).
            metrics.TOO_LARGE.labels(self.consumer).inc()
            log(logger, logging.WARNING, "document_too_large", namespace=rejected.namespace,
                node_id=rejected.node_id, version=rejected.version, size=rejected.size,
                error=rejected.error)
        else:
            log(logger, logging.ERROR, "document_rejected", namespace=rejected.namespace,
                node_id=rejected.node_id, version=rejected.version, status=rejected.status,
                error=rejected.error)
        deadletters.record(self.engine, self.consumer, rejected)

    def report_held_back(self, partition: int, waited: float, writers: list[Writer]) -> None:
        """A partition's reader has been held back ``waited`` seconds by ``writers``:
        export them, and log them when they change (else at most every 30 s)."""
        metrics.READ_WAITING.labels(self.consumer, str(partition)).set(waited)
        names = frozenset(str(w.pid) if w.pid is not None else f"prepared:{w.gid}"
                          for w in writers)
        with self._held_lock:
            self._held[partition] = writers
            self._export_held()
            last = self._held_logged.get(partition)
            now = time.monotonic()
            if last is not None and last[0] == names and now - last[1] < 30.0:
                return
            self._held_logged[partition] = (names, now)
        log(logger, logging.WARNING, "log_read_waiting", partition=partition,
            waited=round(waited, 3), blockers=[w.as_dict() for w in writers],
            hint="transactions holding a block of event positions: they end at commit, "
                 "rollback or idle_in_transaction_session_timeout")

    def report_resumed(self, partition: int, waited: float) -> None:
        metrics.READ_WAITING.labels(self.consumer, str(partition)).set(0)
        with self._held_lock:
            self._held.pop(partition, None)
            self._held_logged.pop(partition, None)
            self._export_held()
        log(logger, logging.INFO, "log_read_resumed", partition=partition,
            waited=round(waited, 3))

    def _export_held(self) -> None:
        """Set READ_BLOCKER_AGE to the writers that hold back any partition (the lock held)."""
        ages: dict[tuple[str, str], float] = {}
        for writers in self._held.values():
            for wr in writers:
                key = (str(wr.pid) if wr.pid is not None else f"prepared:{wr.gid}", wr.database)
                ages[key] = max(ages.get(key, 0.0), wr.age or 0.0)
        for key in self._held_exported - ages.keys():
            metrics.READ_BLOCKER_AGE.remove(self.consumer, *key)
        for key, age in ages.items():
            metrics.READ_BLOCKER_AGE.labels(self.consumer, *key).set(age)
        self._held_exported = set(ages)

    def _indexed_before(self) -> bool:
        with self.engine.connect() as conn:
            return any(p > 0 for p in checkpoints.load_all(conn, self.consumer).values())

    def index_answered(self, stats: BulkStats) -> None:
        """A bulk request through the alias had items answered: the alias exists (writes
        require it, and a missing one fails the request), so the gauge goes back to 0
        even when the failure it recovered from was seen by a step that does not write."""
        if stats.answered:
            metrics.INDEX_MISSING.labels(self.consumer).set(0)

    def check_index(self) -> None:
        """After a failed batch: is the alias gone? Then say so, loudly and as a metric,
        and keep retrying without recreating it (see ``IndexMissing``): writes go to
        the alias only, so nothing is applied or checkpointed until a rebuild puts it
        back. A search server that does not answer is the batch error's to report."""
        alias = self.config.alias
        try:
            if alias_targets(self.es, alias):
                metrics.INDEX_MISSING.labels(self.consumer).set(0)
                return
            message = missing_alias_message(alias, True, our_indices(self.es, alias))
        except Exception as exc:
            log(logger, logging.DEBUG, "index_check_failed", error=str(exc))
            return
        metrics.INDEX_MISSING.labels(self.consumer).set(1)
        log(logger, logging.ERROR, "index_missing", alias=alias, error=message)

    def _setup(self) -> bool:
        """Index, checkpoint layout and membership, retried until they work or stop."""
        delay = self.config.backoff_base
        while not self._stop.is_set():
            try:
                # Waiting for a database that is up but never migrated would wait forever.
                require_current(self.engine)
                # A new consumer on a compacted log: its index from nodes, first.
                bootstrap(self.coord, self.es, self.config.alias, self.consumer,
                          self.config.partitions, self._stop)
                if self._stop.is_set():
                    return False
                index = ensure_alias(self.es, self.config.alias, indexed=self._indexed_before())
                check_mapping(self.es, index, self.config.alias)
                self._check_request_limit()
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
        try:
            with self.engine.connect() as conn:
                for st in status.partitions(conn, self.consumer):
                    label = str(st.partition)
                    metrics.LAG_EVENTS.labels(self.consumer, label).set(st.lag_events)
                    metrics.LAG_SECONDS.labels(self.consumer, label).set(st.lag_seconds)
            metrics.DEAD_LETTERS_PENDING.labels(self.consumer).set(
                deadletters.count_pending(self.engine, self.consumer)
            )
        except Exception as exc:
            log(logger, logging.WARNING, "lag_metrics_failed", error=str(exc))

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

    def _add_verify(self, scheduler: Any, cron: str) -> None:
        """Schedule ``verify`` of this worker's alias. A document that differs only
        because this worker has not applied the latest events yet is rechecked after
        waiting (bounded) for this consumer to catch up, so it is not counted as drift."""
        from .verify import add_verify_job, scheduled_verify

        def settle(position: int) -> bool:
            return wait_indexed(self.engine, position, VERIFY_SETTLE_SECONDS, self.consumer)

        add_verify_job(
            scheduler,
            partial(scheduled_verify, self.coord, self.es, self.config.alias, settle=settle),
            cron,
        )
        log(logger, logging.INFO, "verify_scheduled", cron=cron, alias=self.config.alias)

    def _add_snapshot(self, scheduler: Any, cron: str) -> None:
        """Schedule snapshots of the event log (and compaction, with a retention);
        with several workers one takes each (``indexer.retention``)."""
        from .retention import add_snapshot_job

        add_snapshot_job(scheduler, self.engine, cron, self.config.compact_retain)
        log(logger, logging.INFO, "snapshot_scheduled", cron=cron,
            compact_retain=None if self.config.compact_retain is None
            else self.config.compact_retain.total_seconds())

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
                self._add_verify(scheduler, self.config.verify_cron)
            if self.config.snapshot_cron:
                self._add_snapshot(scheduler, self.config.snapshot_cron)
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
