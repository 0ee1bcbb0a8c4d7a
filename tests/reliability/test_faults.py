"""Faults during a concurrent workload, each ending in the history checks and, after the
indexer catches up, Elasticsearch equal to PostgreSQL.

* PostgreSQL restarted (fast shutdown, then start, same port and data directory) while
  client threads write through ONE ``Coordinator`` and an indexer worker runs in a
  thread: the clients get typed errors (never a raw driver exception) during the
  outage, the same ``Coordinator`` works again afterwards (``pool_pre_ping``), nothing
  acknowledged is lost, and the worker recovers by itself.
* ``kill -9`` of the indexer worker process at random moments, many times, while client
  processes write (``test_histories.run_history``); then a last worker catches up.
* Elasticsearch answering errors (503, 429, dropped connections, bulk items refused with
  429) for a while: the worker backs off without moving its checkpoint, then converges.
"""

from __future__ import annotations

import gc
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.migrate import upgrade
from indexer.search_engine import SearchEngine
from pathkeeper.local.postgres import LocalPostgres
from pathkeeper.local.worker_process import WorkerProcess

from .fault_support import (
    ErrorProxy,
    ThreadClient,
    check_run,
    indexer_support,
    worker_alive,
    worker_thread,
)
from .history_client import TOPS
from .test_histories import run_history

TIMEOUT = 120.0


def wait_until(what: str, cond: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll an external condition (a log file, a counter of other threads) until it holds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def batch_retries(consumer: str, partitions: int) -> float:
    """The worker's failed-batch counter (in this process: a worker thread's)."""
    return sum(
        REGISTRY.get_sample_value(
            "pathkeeper_indexer_batch_retries_total",
            {"consumer": consumer, "partition": str(p)},
        ) or 0.0
        for p in range(partitions)
    )


def acknowledged_after(client: ThreadClient, since: float) -> int:
    return sum(
        1 for c, t in zip(client.calls, client.returned, strict=False)
        if t > since and c.ret is not None and c.ret.get("seq") is not None
    )


def all_acknowledged(clients: list[ThreadClient], since: float) -> Callable[[], bool]:
    """The condition: every client got at least 3 acknowledged changes after ``since``."""
    return lambda: all(acknowledged_after(c, since) >= 3 for c in clients)


def started_after(worker: WorkerProcess, starts: int) -> Callable[[], bool]:
    """The condition: the worker logged more than ``starts`` ``worker_started`` lines."""
    return lambda: len(worker.started_lines()) > starts


def unavailable_between(clients: list[ThreadClient], start: float, end: float) -> int:
    return sum(
        1 for cl in clients for c, t in zip(cl.calls, cl.returned, strict=False)
        if start < t <= end and c.ret is not None and c.ret.get("err") == "Unavailable"
    )


# ---------------------------------------------------------------- PostgreSQL restarted


# A server-side cursor (the worker's subtree stream, ``walk``) whose connection the
# restart broke cannot be closed: psycopg's ``ServerCursor.close()`` raises on the dead
# connection before marking itself closed, and its ``__del__`` then warns. Nothing leaks
# but a Python object; the suite turns warnings into errors, so this one is let through,
# and the test collects its garbage before it ends: a cursor held in a reference cycle
# (an exception's frames) was otherwise collected during a later test, outside this
# filter, and failed that one.
@pytest.mark.filterwarnings(
    "ignore:<psycopg.ServerCursor object at .*> was deleted while still open:ResourceWarning"
)
def test_postgres_restart_under_load(
    es: SearchEngine, es_url: str, alias: str, long_run: bool
) -> None:
    restarts, threads, outage = (6, 8, 3.0) if long_run else (2, 4, 1.0)
    ns = "pgr"
    # A cluster of its own: restarting the session's would break every other test.
    with LocalPostgres() as pg:
        url = pg.create_database("faults")
        upgrade(url)
        with Coordinator.connect(url, lock_timeout=2.0, connect_timeout=2.0) as coord:
            setup = [coord.create_namespace(ns).seq] + [coord.mkdir(ns, f"/{t}").seq for t in TOPS]
            stop = threading.Event()
            clients = [ThreadClient(coord, ns, seed, stop) for seed in range(threads)]
            with worker_thread(
                url, es_url, alias, partitions=2, poll_interval=0.2,
                backoff_base=0.05, backoff_cap=0.5,
            ) as worker:
                retries_before = batch_retries(worker.consumer, 2)
                for c in clients:
                    c.thread.start()
                try:
                    since = time.monotonic()
                    for _ in range(restarts):
                        wait_until("every client acknowledged", all_acknowledged(clients, since))
                        down = time.monotonic()
                        pg.pg_ctl_stop("fast")
                        time.sleep(outage)  # the outage's duration, not a synchronisation
                        pg.pg_ctl_start()
                        since = time.monotonic()
                        assert unavailable_between(clients, down, since) > 0, (
                            "no client saw the outage"
                        )
                    # After the last restart the same Coordinator works for every client.
                    wait_until("every client acknowledged after the restart",
                               all_acknowledged(clients, since))
                finally:
                    stop.set()
                    for c in clients:
                        c.thread.join(60)
                # The worker thread was never restarted: it must have failed batches during
                # the outages and caught up by itself.
                docs = indexer_support.assert_index_matches(coord, es, alias, timeout=TIMEOUT)
                assert batch_retries(worker.consumer, 2) > retries_before
            calls = [call for c in clients for call in c.calls]
            report = check_run(coord, ns, calls, [s for s in setup if s is not None])
    gc.collect()  # the broken cursors, under this test's filter (see above)
    counters = report.counters
    counters["restarts"] = restarts
    counters["documents_compared"] = docs
    print(f"\npostgres restart: {dict(sorted(counters.items()))}")
    assert report.violations == [], "\n".join(report.violations[:20])
    assert counters["error:Unavailable"] >= restarts
    assert counters["acknowledged_mutations"] >= 10 * threads


# ---------------------------------------------------------------- kill -9 of the worker


def test_worker_kill_9_during_concurrent_history(
    database_url: str, coord: Coordinator, es: SearchEngine, es_url: str, alias: str,
    tmp_path: Path, long_run: bool,
) -> None:
    clients, seconds = (8, 120.0) if long_run else (4, 12.0)
    logs = tmp_path / "clients"
    logs.mkdir()
    worker = WorkerProcess(
        database_url, es_url, alias, tmp_path / "worker.log", "--partitions", "2",
    )
    stop = threading.Event()
    kills: list[int] = []
    errors: list[BaseException] = []
    rng = random.Random()

    def killer() -> None:
        """Start the worker, let it run a random while, kill -9 it; again until stopped."""
        try:
            while not stop.is_set():
                starts = len(worker.started_lines())
                worker.start()
                wait_until("the worker to start", started_after(worker, starts))
                stop.wait(rng.uniform(0.1, 1.2))  # random fault timing: any moment is valid
                worker.kill9()
                kills.append(1)
        except BaseException as exc:
            errors.append(exc)

    killing = threading.Thread(target=killer, daemon=True)
    try:
        killing.start()
        min_kills = 20 if long_run else 3
        counters, violations = run_history(database_url, coord, logs, clients, seconds, False,
                                           keep_going=lambda: len(kills) < min_kills)
        stop.set()
        killing.join(90)
        assert not errors, errors
        assert not killing.is_alive()
        worker.ensure_dead()
        starts = len(worker.started_lines())
        worker.start()  # the last incarnation catches up
        docs = indexer_support.assert_index_matches(coord, es, alias, timeout=TIMEOUT)
        # The index may match before this incarnation even started (the one killed last
        # had caught up): its SIGTERM handler is in place once it logs that it started.
        wait_until("the last worker to start", started_after(worker, starts))
        assert worker.terminate() == 0
    finally:
        stop.set()
        worker.ensure_dead()
    counters["worker_kills"] = len(kills)
    counters["documents_compared"] = docs
    applied = sum(1 for line in worker.log_lines() if line.get("event") == "batch_applied")
    counters["worker_batches_applied"] = applied
    print(f"\nworker kill -9: {dict(sorted(counters.items()))}")
    assert violations == [], "\n".join(violations[:20])
    assert len(kills) >= min_kills
    assert counters["acknowledged_mutations"] >= 10 * clients
    assert len(worker.started_lines()) == len(kills) + 1


# ---------------------------------------------------------------- Elasticsearch errors


def test_search_server_answering_errors(
    es: SearchEngine, es_url: str, alias: str, database_url: str, coord: Coordinator,
    long_run: bool,
) -> None:
    ns = "eserr"
    threads, failing_for = (4, 30.0) if long_run else (2, 2.0)
    setup = [coord.create_namespace(ns).seq] + [coord.mkdir(ns, f"/{t}").seq for t in TOPS]
    proxy = ErrorProxy(es_url)
    proxied = proxy.start()
    stop = threading.Event()
    clients = [ThreadClient(coord, ns, seed, stop) for seed in range(threads)]
    try:
        with worker_thread(
            database_url, proxied, alias, partitions=2, poll_interval=0.2,
            backoff_base=0.05, backoff_cap=0.5,
        ) as worker:
            for c in clients:
                c.thread.start()
            wait_until("some changes indexed", lambda: coord.wait_indexed(
                max(s for s in setup if s is not None), 0.5, consumer=worker.consumer))
            before = batch_retries(worker.consumer, 2)
            proxy.fail()
            marker = coord.create_file(ns, "/marker", "written while Elasticsearch fails")
            assert marker.seq is not None
            setup.append(marker.seq)  # the test's own write, not a client's
            wait_until("every kind of error answered", lambda: len(proxy.answered) == 4 and (
                batch_retries(worker.consumer, 2) >= before + 4))
            time.sleep(failing_for)  # how long the errors last, not a synchronisation
            # Nothing was checkpointed past what Elasticsearch refused.
            assert not coord.wait_indexed(marker.seq, 0.2, consumer=worker.consumer)
            proxy.recover()
            stop.set()
            for c in clients:
                c.thread.join(60)
            docs = indexer_support.assert_index_matches(coord, es, alias, timeout=TIMEOUT)
    finally:
        stop.set()
        proxy.close()
    calls = [call for c in clients for call in c.calls]
    report = check_run(coord, ns, calls, [s for s in setup if s is not None])
    counters = report.counters
    counters["documents_compared"] = docs
    for kind, n in proxy.answered.items():
        counters[f"proxy:{kind}"] = n
    print(f"\nsearch errors: {dict(sorted(counters.items()))}")
    assert report.violations == [], "\n".join(report.violations[:20])
    assert counters["acknowledged_mutations"] >= 10 * threads


# ---------------------------------------------------------------- lease connection cut


def test_worker_survives_its_lease_connection_being_cut(
    database_url: str, coord: Coordinator, es: SearchEngine, es_url: str, alias: str,
) -> None:
    """What a PostgreSQL restart does to the worker's lease connection, many times over:
    its backend is terminated (``pg_terminate_backend``, the same 57P01 as a fast
    shutdown) again and again, at any point of the worker's main loop. The worker must
    stay up, take its partitions back and converge."""
    coord.create_namespace("cut")
    with worker_thread(database_url, es_url, alias, partitions=2, poll_interval=0.05,
                       backoff_base=0.01, backoff_cap=0.1) as worker:
        # Faults, not synchronisation: as fast as the server terminates them.
        started = time.monotonic()
        cuts = 0
        with coord.engine.connect() as conn:
            while time.monotonic() < started + 10.0 and worker_alive(worker):
                cuts += int(conn.execute(text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = 'pathkeeper-indexer-leases' "
                    "AND datname = current_database()")).scalar_one())
                conn.commit()
        print(f"\n{cuts} lease connections cut in {time.monotonic() - started:.1f} s")
        assert worker_alive(worker), "the worker died (its traceback follows at exit)"
        for i in range(20):
            coord.create_file("cut", f"/f{i}", "after the cuts")
        assert cuts > 10
        indexer_support.assert_index_matches(coord, es, alias, timeout=60)
