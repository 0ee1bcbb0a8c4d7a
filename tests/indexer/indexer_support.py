"""Helpers for the indexer tests: workers in a thread, the index-equals-PostgreSQL
check, random concurrent clients. (A worker as a real process and fast bulk test data
are the package's, shared with the benchmarks: ``pathkeeper.local.worker_process``,
``pathkeeper.local.bulk_tree``.)"""

from __future__ import annotations

import itertools
import random
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import text

from coordinator import Coordinator, CoordinatorError
from coordinator.event_reader import safe_bound
from coordinator.indexing import consumer_for
from coordinator.shard_map import ShardMap
from indexer import bulk
from indexer.contract import document_for, is_indexed
from indexer.search_engine import SearchEngine
from indexer.worker import Worker, WorkerConfig


@contextmanager
def running_worker(
    database_url: str, es_url: str, alias: str, shard_map: ShardMap | None = None,
    **options: Any,
) -> Iterator[Worker]:
    """A worker running in a thread of this process (stopped on exit). A worker that
    dies fails the test with its traceback; ``worker_alive`` tells whether it runs.
    ``shard_map``: the shards it indexes (default: ``database_url`` alone)."""
    options.setdefault("poll_interval", 0.5)
    options.setdefault("partitions", 2)
    worker = Worker(WorkerConfig(database_url=database_url, es_url=es_url, alias=alias, **options),
                    shard_map)
    died: list[str] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            died.append("".join(traceback.format_exception(exc)))

    thread = threading.Thread(target=run, name="test-worker", daemon=True)
    _worker_threads[id(worker)] = thread
    thread.start()
    if not worker.ready.wait(30) or not worker.listener.listening.wait(30):
        raise AssertionError(f"worker did not start: {died}")
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive(), "worker did not stop"
        del _worker_threads[id(worker)]
        assert not died, f"the worker died:\n{died[0]}"


_worker_threads: dict[int, threading.Thread] = {}


def worker_alive(worker: Worker) -> bool:
    """Whether the thread of a ``running_worker`` worker is still running."""
    return _worker_threads[id(worker)].is_alive()


def run_once(database_url: str, es_url: str, alias: str, partitions: int = 2) -> None:
    """Catch up with the log, then return (the worker's --once mode, in this process)."""
    config = WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                          partitions=partitions, once=True)
    assert Worker(config).run() == 0


class TcpProxy:
    """A TCP relay in front of a search server that can be cut off and restored (on the
    same port): the outage test's stand-in for stopping a cluster we may not stop."""

    def __init__(self, target_url: str) -> None:
        hostport = target_url.split("://", 1)[1].rstrip("/")
        host, port = hostport.rsplit(":", 1)
        self.target = (host, int(port))
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> str:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return f"http://127.0.0.1:{self.port}"

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        """Refuse new connections and cut every open one."""
        if self._listener is not None:
            # close() alone does not wake the thread blocked in accept(), which would go
            # on accepting: shutdown() does, and makes it return.
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()


def last_position(coord: Coordinator) -> int:
    with coord.engine.connect() as conn:
        return int(conn.execute(text("SELECT coalesce(max(position), 0) FROM events")).scalar_one())


def wait_caught_up(coord: Coordinator, alias: str, timeout: float = 60.0) -> None:
    pos = last_position(coord)
    assert coord.wait_indexed(pos, timeout, consumer=consumer_for(alias)), (
        f"indexer did not reach position {pos} within {timeout} s"
    )


def index_docs(es: SearchEngine, alias: str, ns: str | None = None) -> dict[str, dict[str, Any]]:
    """Every document in the index (of ``ns``, routed and filtered, if given), by id."""
    es.refresh(alias)
    query: dict[str, Any] = {"term": {"namespace": ns}} if ns else {"match_all": {}}
    docs: dict[str, dict[str, Any]] = {}
    after: list[Any] | None = None
    while True:
        body: dict[str, Any] = {"query": query, "sort": [{"node_id": "asc"}], "size": 5000,
                                "track_total_hits": False}
        if after is not None:
            body["search_after"] = after
        resp = es.search(alias, body, routing=ns)
        hits = resp["hits"]["hits"]
        if not hits:
            return docs
        for h in hits:
            docs[h["_id"]] = h["_source"]
        after = hits[-1]["sort"]


def expected_docs(coord: Coordinator, ns: str) -> dict[str, dict[str, Any]]:
    """What the index must hold for ``ns``, from PostgreSQL (``seq`` left out)."""
    out = {}
    for node in coord.walk(ns):
        if is_indexed(node):
            doc = document_for(node, 0)
            del doc["seq"]
            out[node.id] = doc
    return out


def assert_index_matches(
    coord: Coordinator, es: SearchEngine, alias: str, timeout: float = 60.0
) -> int:
    """Wait until the worker caught up, then: exactly one document per live non-root
    node, every field equal to PostgreSQL, and no document of any other namespace.
    Returns the number of documents checked."""
    return assert_index_matches_shards([coord], es, alias, timeout)


def assert_index_matches_shards(
    coords: list[Coordinator], es: SearchEngine, alias: str, timeout: float = 60.0
) -> int:
    """``assert_index_matches`` over several shards (a coordinator on each) writing into
    one index: each shard's log caught up and each of its namespaces equal to its rows,
    and the index holding nothing else."""
    total = 0
    live: list[str] = []
    for coord in coords:
        wait_caught_up(coord, alias, timeout)
        bound = safe_bound(coord.engine) or 0
        for ns in coord.namespaces():
            live.append(ns)
            want = expected_docs(coord, ns)
            got = index_docs(es, alias, ns)
            for doc in got.values():
                assert 0 < doc["seq"] <= bound, doc
            stripped = {k: {f: v for f, v in d.items() if f != "seq"} for k, d in got.items()}
            missing = sorted(set(want) - set(stripped))
            extra = sorted(set(stripped) - set(want))
            assert not missing, (
                f"{ns}: {len(missing)} nodes not indexed, e.g. {want[missing[0]]}")
            assert not extra, f"{ns}: {len(extra)} stale documents, e.g. {stripped[extra[0]]}"
            wrong = [k for k in want if want[k] != stripped[k]]
            assert not wrong, (
                f"{ns}: {len(wrong)} differ, e.g. {want[wrong[0]]} != {stripped[wrong[0]]}"
            )
            total += len(want)
    everything = index_docs(es, alias)
    strays = [d for d in everything.values() if d["namespace"] not in live]
    assert not strays, f"{len(strays)} documents of dropped namespaces, e.g. {strays[0]}"
    assert len(everything) == total
    return total


# ---------------------------------------------------------------- workloads


def random_client(
    coord: Coordinator, namespaces: list[str], stop: threading.Event, seed: int,
    succeeded: Callable[[], None] = lambda: None,
) -> int:
    """One client doing random creates, renames, moves, writes and deletes until ``stop``.
    Returns how many calls succeeded (and calls ``succeeded`` after each). Expected
    refusals (races) are ignored."""
    rng = random.Random(seed)
    done = 0
    while not stop.is_set():
        ns = rng.choice(namespaces)
        try:
            nodes = coord.listdir(ns, "/") + [
                n for d in coord.listdir(ns, "/") if d.is_dir for n in coord.listdir(ns, d.path)
            ]
            dirs = ["/"] + [n.path for n in nodes if n.is_dir]
            files = [n.path for n in nodes if not n.is_dir]
            r = rng.random()
            name = f"n{rng.randrange(40)}"
            parent = rng.choice(dirs).rstrip("/")
            if r < 0.25:
                coord.create_file(ns, f"{parent}/{name}", f"text {rng.random()}",
                                  {"k": rng.randrange(5)})
            elif r < 0.40:
                coord.mkdir(ns, f"{parent}/{name}")
            elif r < 0.55 and files:
                coord.write_file(ns, rng.choice(files), f"new {rng.random()}", {"w": 1})
            elif r < 0.70 and nodes:
                coord.rename(ns, rng.choice(nodes).path, name)
            elif r < 0.90 and nodes:
                coord.move(ns, rng.choice(nodes).path, f"{parent}/{name}")
            elif nodes:
                coord.delete(ns, rng.choice(nodes).path, recursive=True)
            done += 1
            succeeded()
        except CoordinatorError:
            pass
    return done


def run_clients(
    coord: Coordinator, namespaces: list[str], clients: int, seconds: float,
    at_least: int = 0, longest: float = 120.0,
) -> int:
    """Run ``clients`` concurrent random clients for ``seconds``, and on until ``at_least``
    calls succeeded (at most ``longest`` seconds in all); re-raise their errors. The
    workload is a size, not a duration: on a loaded machine the same seconds hold fewer
    calls, so a test that needs a workload of some size asks for it with ``at_least``."""
    stop = threading.Event()
    results: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    succeeded = [0]

    def count() -> None:
        with lock:
            succeeded[0] += 1

    def body(seed: int) -> None:
        try:
            results.append(random_client(coord, namespaces, stop, seed, count))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)  # the workload's least duration, not a synchronisation
    while (succeeded[0] < at_least and time.monotonic() - started < longest
           and not errors and any(t.is_alive() for t in threads)):
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return sum(results)


class SearchServerGone(Exception):
    """What ``one_chunk_then_gone`` raises."""


def one_chunk_then_gone() -> Callable[..., Any]:
    """A stand-in for ``indexer.bulk.send_chunks`` as ``bulk.send_stream`` calls it for a
    subtree pass or a node batch too large to read whole (patch it in as
    ``bulk.send_chunks``): the first request really sent, then ``SearchServerGone``, as a
    search server that goes away in the middle of a pass."""
    real = bulk.send_chunks

    def send_chunks(es: SearchEngine, chunks: Any, reject: Any, **options: Any) -> Any:
        real(es, itertools.islice(chunks, 1), reject, **options)
        raise SearchServerGone("the search server went away mid-pass")

    return send_chunks


class OverlapWatch:
    """The real search server, each ``_bulk`` request held at its start until another
    one is in flight too (at most ``hold`` seconds): ``most`` is how many a caller kept
    in flight at once. Every call reaches the server as it was made."""

    def __init__(self, es: SearchEngine, hold: float = 3.0) -> None:
        self._es = es
        self._hold = hold
        self._cond = threading.Condition()
        self._active = 0
        self.most = 0

    def bulk(self, operations: Any, **params: Any) -> dict[str, Any]:
        with self._cond:
            self._active += 1
            self.most = max(self.most, self._active)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.most >= 2, timeout=self._hold)
        try:
            return self._es.bulk(operations, **params)
        finally:
            with self._cond:
                self._active -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._es, name)
