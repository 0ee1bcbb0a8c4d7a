"""Two throwaway PostgreSQL clusters with ``wal_level = logical`` (a source and a target
shard of a namespace move), a directory database on the second, and writer threads."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import pytest

from coordinator import Coordinator
from coordinator.commands import CreateFile, Mkdir, WriteFile
from coordinator.errors import NamespaceFrozen, NamespaceMoved
from coordinator.migrate import upgrade, upgrade_directory
from pathkeeper.local.postgres import LocalPostgres

_counter = itertools.count()


@pytest.fixture(scope="session")
def move_clusters() -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    with LocalPostgres(logical_replication=True) as a, \
            LocalPostgres(logical_replication=True) as b:
        for pg in (a, b):
            upgrade(pg.create_database("pk_template"))
        yield a, b


@dataclass
class TwoShards:
    """A directory naming shards ``a`` (source) and ``b`` (target), one database each."""

    directory_url: str
    source_url: str
    target_url: str
    source: LocalPostgres
    coords: dict[str, Coordinator] = field(default_factory=dict)

    def url(self, shard: str) -> str:
        return self.source_url if shard == "a" else self.target_url

    def coord(self, shard: str) -> Coordinator:
        if shard not in self.coords:
            self.coords[shard] = Coordinator.connect(self.url(shard), lock_timeout=5.0)
        return self.coords[shard]

    def create(self, ns: str) -> None:
        """``ns`` created on ``a`` and placed there."""
        self.coord("a").create_namespace(ns)
        self.directory(
            "INSERT INTO placements (namespace, shard) VALUES (%s, 'a')", (ns,))

    def directory(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with psycopg.connect(self.directory_url, autocommit=True) as conn:
            cur = conn.execute(sql.encode(), params)
            return list(cur.fetchall()) if cur.description else []

    def placed(self, ns: str) -> str:
        return str(self.directory(
            "SELECT shard FROM placements WHERE namespace = %s", (ns,))[0][0])

    def query(self, shard: str, sql: str, params: tuple[object, ...] = ()
              ) -> list[tuple[object, ...]]:
        with psycopg.connect(self.url(shard), autocommit=True) as conn:
            cur = conn.execute(sql.encode(), params)
            return list(cur.fetchall()) if cur.description else []

    def close(self) -> None:
        for c in self.coords.values():
            c.close()


@pytest.fixture
def shards(move_clusters: tuple[LocalPostgres, LocalPostgres]) -> Iterator[TwoShards]:
    a, b = move_clusters
    n = f"{os.getpid()}_{next(_counter)}"
    source = a.create_database(f"pk_src_{n}", template="pk_template")
    target = b.create_database(f"pk_tgt_{n}", template="pk_template")
    # The directory on the target's cluster: a test stops the source's.
    directory = b.create_database(f"pk_dir_{n}")
    upgrade_directory(directory)
    with psycopg.connect(directory, autocommit=True) as conn:
        conn.execute(b"INSERT INTO shards (name, url) VALUES ('a', %s), ('b', %s)",
                     (source, target))
    two = TwoShards(directory, source, target, a)
    yield two
    two.close()


def unique_ns(prefix: str = "m") -> str:
    return f"{prefix}{os.getpid()}x{next(_counter)}"


@dataclass
class Ack:
    path: str
    version: int
    seq: int
    at: float
    shard: str


class Writer(threading.Thread):
    """Writes files of one namespace through the coordinator of the shard the directory
    names, as a routing client would: a frozen namespace is retried after a pause, a
    moved one is looked up again. Logs every acknowledged write."""

    def __init__(self, shards: TwoShards, ns: str, name: str, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.shards, self.ns, self.tag, self.pause = shards, ns, name, pause
        self.acks: list[Ack] = []
        self.refused = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self._coords: dict[str, Coordinator] = {}

    def _coord(self, shard: str) -> Coordinator:
        if shard not in self._coords:
            self._coords[shard] = Coordinator.connect(self.shards.url(shard), lock_timeout=5.0)
        return self._coords[shard]

    def run(self) -> None:
        try:
            shard = self.shards.placed(self.ns)
            self._coord(shard).execute(self.ns, Mkdir(f"/{self.tag}", parents=True))
            i = 0
            while not self.stop.is_set():
                path = f"/{self.tag}/f{i % 20}"
                try:
                    coord = self._coord(shard)
                    if i < 20:
                        r = coord.execute(self.ns, CreateFile(path, f"v{i}"))
                    else:
                        r = coord.execute(self.ns, WriteFile(path, f"v{i}"))
                except (NamespaceFrozen, NamespaceMoved):
                    self.refused += 1
                    time.sleep(0.02)
                    shard = self.shards.placed(self.ns)
                    continue
                assert r.seq is not None
                self.acks.append(Ack(path, r.version, r.seq, time.monotonic(), shard))
                i += 1
                time.sleep(self.pause)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            for c in self._coords.values():
                c.close()

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=60)
        assert not self.is_alive()
        assert not self.errors, self.errors
