"""The indexer's wake-up from a writing process: never lost, at most one per interval.

Every commit with events is followed by a notify sent after it (so a listener that
read the log before that notify reads again and finds the commit); under a burst of
commits, the notifies are at least ``notify_interval`` apart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.db import libpq_url
from coordinator.event_appender import NOTIFY_CHANNEL


class Listener:
    """A LISTEN connection of its own, recording when each notification arrived."""

    def __init__(self, database_url: str) -> None:
        self.arrived: list[float] = []
        self.senders: list[int] = []  # the backend pid that sent each notification
        self._url = libpq_url(database_url)
        self._done = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _listen(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self._ready.set()
            while not self._done.is_set():
                for notify in conn.notifies(timeout=0.05, stop_after=1):
                    self.senders.append(notify.pid)
                    self.arrived.append(time.monotonic())

    def close(self) -> None:
        self._done.set()
        self._thread.join(5)

    def arrival_after(self, t: float, timeout: float = 10.0) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [a for a in list(self.arrived) if a > t]
            if later:
                return later[0]
            time.sleep(0.01)
        return None


@pytest.fixture
def listener(database_url: str) -> Iterator[Listener]:
    got = Listener(database_url)
    yield got
    got.close()


def test_a_burst_of_renames_is_announced_at_most_once_per_interval(
    database_url: str, listener: Listener
) -> None:
    interval = 0.25
    with Coordinator.connect(database_url, notify_interval=interval) as coord:
        coord.create_namespace("t")
        coord.create_file("t", "/f0")
        time.sleep(interval)
        listener.arrived.clear()
        start = time.monotonic()
        name = "f0"
        for i in range(1, 301):
            coord.rename("t", f"/{name}", f"f{i}")
            name = f"f{i}"
        last_commit = time.monotonic()
        # The last rename's wake-up comes after it, within the interval (plus slack).
        assert listener.arrival_after(last_commit) is not None
        time.sleep(interval)
    arrived = listener.arrived
    # Sends at least an interval apart (arrival times are not checked: a listener that
    # was kept off the CPU receives several at once). Without the interval, each
    # commit would be announced on its own unless the thread was still busy.
    assert 1 <= len(arrived) <= (last_commit - start) / interval + 2, (len(arrived), arrived)


def test_the_first_rename_after_a_quiet_spell_is_announced_at_once(
    database_url: str, listener: Listener
) -> None:
    # An interval far longer than the test: a wake-up that waited for it would miss.
    with Coordinator.connect(database_url, notify_interval=60.0) as coord:
        coord.create_namespace("t")  # its own notify, the first: sent at once
        assert listener.arrival_after(0.0) is not None
        # The next commit is less than the interval after that notify: it waits.
        coord.create_file("t", "/f")
        committed = time.monotonic()
        assert listener.arrival_after(committed, timeout=1.0) is None
    # Closing the coordinator sends what is pending rather than dropping it.
    assert listener.arrival_after(committed, timeout=10.0) is not None


def test_the_notifier_keeps_a_connection_of_its_own(
    database_url: str, listener: Listener
) -> None:
    """The notifier sends every notify on one connection it keeps, outside the writers'
    pool: with a pool of one, writes after a notify still get that pool's connection at
    once (they waited out the pool's timeout while the notifier kept it), and the
    notifier neither shares it nor opens a new connection per notify."""
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0,
                             pool_timeout=2.0) as coord:
        coord.create_namespace("t")
        listener.senders.clear()
        for i in range(3):
            committed = time.monotonic()
            coord.create_file("t", f"/f{i}")
            # The notify for it went out (so the notifier had its connection) ...
            assert listener.arrival_after(committed) is not None
            # ... and the next write gets the connection at once, well within the timeout.
            started = time.monotonic()
            coord.rename("t", f"/f{i}", f"g{i}")
            assert time.monotonic() - started < 1.0
        with coord.engine.connect() as conn:
            writers = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    assert len(listener.senders) >= 3
    assert len(set(listener.senders)) == 1, listener.senders
    assert listener.senders[0] != writers
