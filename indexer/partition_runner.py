"""One leased partition's runner: its node lane (a thread) reads the event log in
order, writes the documents of the nodes each batch names, settles the batches in read
order and hands their subtree work to the partition's ``SubtreeLane``; the checkpoint
follows both lanes (``publish_checkpoint``). The process around it (leases, wake-ups,
setup) is ``indexer.worker``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from sqlalchemy import Engine

from coordinator import Coordinator
from coordinator.errors import CursorExpired
from coordinator.event_reader import Partition, WriterInFlight
from coordinator.results import Event

from . import checkpoints, metrics
from .applier import Abandoned, Applier, NodeActions, SubtreeWork
from .bulk import BulkStats
from .index_health import IndexHealth
from .logs import log
from .plan import PAYLOAD_FREE_TYPES, plan_batch
from .read_waits import ReadWaits
from .subtree_lane import NodeLanePriority, SubtreeLane

logger = logging.getLogger("pathkeeper.indexer")


class RunnerConfig(Protocol):
    """What a runner reads of its worker's configuration (``worker.WorkerConfig``)."""

    @property
    def alias(self) -> str: ...
    @property
    def consumer(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def batch_events(self) -> int: ...
    @property
    def once(self) -> bool: ...
    @property
    def backoff_base(self) -> float: ...
    @property
    def backoff_cap(self) -> float: ...
    @property
    def read_wait(self) -> float: ...
    @property
    def read_report_after(self) -> float: ...
    @property
    def node_bulks_in_flight(self) -> int: ...


class RunnerHost(Protocol):
    """What a runner uses of the worker's part on its shard (``shard_work.ShardWork``):
    declared here so that part imports its runners and nothing here imports it."""

    @property
    def config(self) -> RunnerConfig: ...
    @property
    def consumer(self) -> str: ...
    @property
    def target(self) -> int | None: ...
    @property
    def coord(self) -> Coordinator: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def applier(self) -> Applier: ...
    @property
    def index_health(self) -> IndexHealth: ...
    @property
    def read_waits(self) -> ReadWaits: ...
    @property
    def where(self) -> dict[str, Any]: ...

    def label(self, partition: int) -> str: ...

    def wake_main(self) -> None: ...

    def wake_all(self, but: PartitionRunner | None = None) -> None: ...


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

    The node lane pipelines while the log is busy: while batch N's bulk request is in
    flight (a sender thread), it reads batch N+1 and fetches its nodes, and sends that
    too (at most ``node_bulks_in_flight`` requests). A file rename then waits for one
    read, one fetch and one request, not also for the rest of the request before it.
    A lone change (a short batch after a read that found nothing) is one read and one
    request: the lane then waits for the next wake-up instead of reading again. Safe
    because every write carries an external version from a snapshot taken after
    its batch was read (``indexer.applier``): the two requests may be applied in
    either order. What is ordered is the bookkeeping: batches are settled strictly
    in read order (``_settle``): a batch's subtree work goes to the lane, and
    ``acked_cursor`` (what the checkpoint may reach) moves past it, only once its
    request and every earlier one were acknowledged. If any request fails, the ones
    after it are waited for and forgotten and the lane reads again from
    ``acked_cursor``: what they wrote is written again, at the same or higher
    versions (the batches read again may end elsewhere), so never backwards."""

    def __init__(self, worker: RunnerHost, partition: int) -> None:
        #: The worker's part on this partition's shard (its pool, checkpoints, leases).
        self.worker = worker
        self.partition = partition
        self.label = worker.label(partition)
        self.wake = threading.Event()
        #: Wall-clock time of the last notification that woke this runner (0: none yet):
        #: logged with the batch read after it, so a lag can be split at the wake-up.
        self.notified_at = 0.0
        self.stop = threading.Event()
        self.crashed: BaseException | None = None
        #: What is saved: every event up to it is fully applied (both lanes).
        self.checkpoint = 0
        #: When the current run of held-back reads began (None: not held back).
        self._held_since: float | None = None
        self._held_this_read = False
        #: Whether the last read found events of this partition (the log is busy).
        self._read_found = False
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
                    w.index_health.check_index()
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
                    **w.where,
                    checkpoint=self.checkpoint, attempt=attempt, retry_in=round(delay, 3),
                    error=f"{type(exc).__name__}: {exc}")
                self.stop.wait(delay)
                w.index_health.check_index()
        return default

    def _held_back(self, started: float, writers: list[WriterInFlight]) -> None:
        """``read_events`` has waited ``read_report_after`` seconds for ``writers``."""
        self._held_this_read = True
        if self._held_since is None:
            self._held_since = started
        self.worker.read_waits.report_held_back(
            self.partition, time.monotonic() - self._held_since, writers)

    def notified(self) -> None:
        """A notification named this runner's partition: wake it (and note when)."""
        self.notified_at = time.time()
        self.wake.set()

    def _read(self, timings: dict[str, float]) -> tuple[list[Event], int]:
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
                bare_types=PAYLOAD_FREE_TYPES,  # planned from type and node id alone
                # The last read found nothing: this one is most likely a lone change's,
                # read with the bound in one round trip. A busy log's reads (the last
                # one found events) are not: writers in flight would waste the select.
                read_ahead=not self._read_found,
                timings=timings,
            )
        except CursorExpired as exc:
            if not self._adopt_rebuilt_checkpoint(exc):
                raise  # backed off and retried: a rebuild may move the checkpoint meanwhile
            return [], self.read_cursor
        if not self._held_this_read and self._held_since is not None:
            self.worker.read_waits.report_resumed(
                self.partition, time.monotonic() - self._held_since)
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
        timings: dict[str, float] = {"read_at": read_at, "notified_at": self.notified_at}
        events, cursor = self._read(timings)
        if cursor <= self.read_cursor:
            # Nothing new: the runner waits for a wake-up, which a notification or an
            # answer to a request in flight (its done callback) gives. (What was settled
            # above was settled before this read: nothing is left for another step.)
            self._read_found = False
            return False
        after = self.read_cursor
        found_before, self._read_found = self._read_found, bool(events)
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
        version = events[-1].position
        plan = plan_batch(events)
        timings["read"] = time.monotonic() - read_started
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
        # Read the next batch while this one is in flight only if the log is busy: the
        # read before this one found events too, or this one stopped at ``batch_events``.
        # Else this read took everything up to its bound, and whatever commits later
        # notifies after its commit, so after this step's ``wake.clear()``: the wake-up
        # (or this request's answer) comes, and a lone change costs one read, not a
        # second one beside its request, taking the CPU from it.
        return found_before or len(events) >= w.config.batch_events

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
        wrote = False
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
                wrote = True
                self._log_batch(head, stats)
                self.worker.index_health.index_answered(stats)
        if settled:
            self.publish_checkpoint()
        if wrote:
            # Partitions with nothing of their own read too, so their checkpoints keep up
            # with this one's (``wait_indexed`` waits for every partition). Woken once
            # the request was answered, not when it was read: their reads and checkpoint
            # writes would take the CPU from this batch's node fetch and request.
            self.worker.wake_all(but=self)
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
        metrics.count_documents(w.consumer, stats)
        # The wall-clock stamps (epoch seconds) let a benchmark place each event of the
        # batch on a timeline: read started, request sent, acknowledged, settled.
        log(logger, logging.INFO, "batch_applied", partition=self.partition,
            events=batch.events, version=batch.version, after=batch.after, cursor=batch.cursor,
            indexed=stats.indexed, deleted=stats.deleted,
            already_newer=stats.already_newer, rejected=stats.rejected,
            overridden=stats.overridden, subtree_work=batch.work is not None,
            read_seconds=round(t.get("read", 0.0), 4),
            bound_seconds=round(t.get("bound", 0.0), 4),
            nodes_seconds=round(t.get("read_nodes", 0.0), 4),
            bulk_seconds=round(t.get("bulk", 0.0), 4),
            es_took_seconds=round(t.get("es_took", 0.0), 4),
            in_flight=batch.in_flight, seconds=round(seconds, 4),
            notified_at=round(t.get("notified_at", 0.0), 4),
            read_at=round(t.get("read_at", 0.0), 4), sent_at=round(t.get("sent_at", 0.0), 4),
            acked_at=round(t.get("acked_at", 0.0), 4), settled_at=round(time.time(), 4))

