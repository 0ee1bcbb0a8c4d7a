"""The event log writers in flight that hold back a worker's partition readers:
exported as the ``read_waiting`` and ``read_blocker_age`` metrics, and logged
(``log_read_waiting``) when they change, else at most every 30 s."""

from __future__ import annotations

import logging
import threading
import time

from coordinator.event_reader import WriterInFlight

from . import metrics
from .logs import log

logger = logging.getLogger("pathkeeper.indexer")


class ReadWaits:
    """What holds back each partition's reader, for one consumer (all partitions'
    runners report here, from their own threads)."""

    def __init__(self, consumer: str, label_prefix: str = "") -> None:
        self.consumer = consumer
        #: Before the partition number in metric labels (the shard's, with several).
        self.label_prefix = label_prefix
        self._held_lock = threading.Lock()
        self._held: dict[int, list[WriterInFlight]] = {}
        self._held_logged: dict[int, tuple[frozenset[str], float]] = {}
        self._held_exported: set[tuple[str, str]] = set()

    def report_held_back(
        self, partition: int, waited: float, writers: list[WriterInFlight]
    ) -> None:
        """A partition's reader has been held back ``waited`` seconds by ``writers``:
        export them, and log them when they change (else at most every 30 s)."""
        metrics.READ_WAITING.labels(self.consumer, f"{self.label_prefix}{partition}").set(waited)
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
        metrics.READ_WAITING.labels(self.consumer, f"{self.label_prefix}{partition}").set(0)
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
