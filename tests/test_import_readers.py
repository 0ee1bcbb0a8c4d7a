"""An import holds back only the readers of its own namespace's partition.

An import's events insert runs while it holds the position lock: a reader of the log
must wait for it before it may pass the import's blocks. It marks itself with its
namespace (``coordinator/event_appender.py``, "Imports"), so a reader that reads other
namespaces, or other partitions, goes on; readers of its namespace's partition (and
readers of the whole log) wait, and never see a gap."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from tree_checks import run_threads

from coordinator import Coordinator, Event
from coordinator.event_reader import Partition
from coordinator.importer import Importer
from coordinator.unit_of_work import UnitOfWork

PARTITIONS = 4


def partition_of(coord: Coordinator, ns: str) -> int:
    with coord.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT mod(hashtext(:ns)::bigint & 2147483647, :n)"), {"ns": ns, "n": PARTITIONS}
        ).scalar_one())


def namespaces_apart(coord: Coordinator) -> tuple[str, str]:
    """Two namespace names that fall into different partitions (of ``PARTITIONS``)."""
    big = "big"
    other = next(f"small{i}" for i in range(100)
                 if partition_of(coord, f"small{i}") != partition_of(coord, big))
    return big, other


def lines(n: int, prefix: str = "d") -> list[str]:
    return [json.dumps({"path": f"/{prefix}{i // 50}/f{i}", "kind": "file", "content": "x"})
            for i in range(n)]


@contextmanager
def import_held_open(coord: Coordinator, ns: str, n: int) -> Iterator[None]:
    """An import of ``n`` lines into ``ns`` (a thread, its own connection) that wrote its
    nodes and events and waits before COMMIT until the block ends."""
    written = threading.Event()
    release = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            with coord.engine.begin() as conn:
                Importer(conn, ns).run(lines(n))
                written.set()
                assert release.wait(60)
        except BaseException as exc:
            failed.append(exc)
            written.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert written.wait(60) and not failed, failed
    try:
        yield
    finally:
        release.set()
        thread.join(60)
    assert not thread.is_alive() and not failed, failed


def test_a_write_in_another_partition_is_readable_while_an_import_is_open(
    coord: Coordinator,
) -> None:
    big, small = namespaces_apart(coord)
    coord.create_namespace(big)
    coord.create_namespace(small)
    _, start = coord.read_events(wait=5.0)
    mine = Partition(partition_of(coord, small), PARTITIONS)
    theirs = Partition(partition_of(coord, big), PARTITIONS)
    with import_held_open(coord, big, 300):
        made = coord.mkdir(small, "/during")
        began = time.monotonic()
        assert made.seq is not None
        for scope in ({"namespaces": [small]}, {"partition": mine}):
            events, cursor = coord.read_events(after=start, wait=2.0, **scope)  # type: ignore[arg-type]
            assert [e.position for e in events] == [made.seq] and cursor >= made.seq
        assert time.monotonic() - began < 1.0
        # The import's own partition and the whole log must wait for it.
        assert coord.read_events(after=start, partition=theirs, wait=0.3) == ([], start)
        assert coord.read_events(after=start, namespaces=[big, small], wait=0.3) == ([], start)
        assert coord.read_events(after=start, wait=0.3) == ([], start)
    events, _ = coord.read_events(after=start, limit=10_000, wait=5.0)
    assert [e.namespace for e in events] == [big] * (300 + 6) + [small]
    assert [e.position for e in events] == sorted(e.position for e in events)


def test_imports_and_writes_of_several_tenants_leave_no_gap_for_any_reader(
    coord: Coordinator,
) -> None:
    """Writers in three namespaces and repeated imports in a fourth, all at once; live
    readers follow each partition, each namespace and the whole log. Each must end with
    exactly what a final full read gives its scope: nothing skipped, nothing twice, in
    position order."""
    big, _ = namespaces_apart(coord)
    tenants = ["alpha", "beta", "gamma"]
    for ns in [big, *tenants]:
        coord.create_namespace(ns)
    _, start = coord.read_events(wait=5.0)
    stop = threading.Event()
    scopes: dict[str, dict[str, object]] = {"all": {}}
    for p in range(PARTITIONS):
        scopes[f"p{p}"] = {"partition": Partition(p, PARTITIONS)}
    for ns in [big, *tenants]:
        scopes[ns] = {"namespaces": [ns]}
    live: dict[str, list[Event]] = {s: [] for s in scopes}

    def writer(ns: str) -> None:
        for i in range(40):
            def body(uow: UnitOfWork, i: int = i) -> None:
                uow.tree.mkdir(f"/w{i}")
                uow.tree.events.flush()
                time.sleep(0.005)  # position taken, not committed
            coord.run(ns, body)

    def importer() -> None:
        for round_ in range(4):
            coord.import_nodes(big, lines(2000, prefix=f"r{round_}-"))

    def reader(scope: str) -> None:
        cursor = start
        while True:
            done = stop.is_set()
            events, cursor = coord.read_events(
                after=cursor, limit=50, wait=2.0, **scopes[scope]  # type: ignore[arg-type]
            )
            live[scope].extend(events)
            if done and not events:
                return

    readers = [threading.Thread(target=reader, args=(s,), daemon=True) for s in scopes]
    for t in readers:
        t.start()
    run_threads([importer, *(functools.partial(writer, ns) for ns in tenants)], timeout=300)
    stop.set()
    for t in readers:
        t.join(120)
        assert not t.is_alive()
    final, _ = coord.read_events(after=start, limit=1_000_000, wait=5.0)
    assert len(final) == 3 * 40 + 4 * (2000 + 40)
    partition = {ns: partition_of(coord, ns) for ns in [big, *tenants]}

    def in_scope(e: Event, options: dict[str, object]) -> bool:
        nss = options.get("namespaces")
        part = options.get("partition")
        return ((not isinstance(nss, list) or e.namespace in nss)
                and (not isinstance(part, Partition) or partition[e.namespace] == part.index))

    for scope, options in scopes.items():
        wanted = [e.position for e in final if in_scope(e, options)]
        assert [e.position for e in live[scope]] == wanted, scope
