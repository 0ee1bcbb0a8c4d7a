"""A shard map over a fixed list of shards, for tests of code that takes a ``ShardMap``
(the indexer over several shards). Namespaces are placed by ``place`` (or by name in
``placed``); nothing is persisted. Run as a script it is an indexer worker process over
the shards named on its command line (``kill -9``-able, with its own connections):

    python tests/shard_maps.py ALIAS PARTITIONS ES_URL NAME=URL [NAME=URL ...]
"""

from __future__ import annotations

import sys

from coordinator.errors import AlreadyExists, NotFound
from coordinator.shard_map import Shard


class FixedShards:
    """``ShardMap`` over ``shards`` (the first is where ``place`` puts a namespace
    without a named shard)."""

    def __init__(self, shards: list[Shard], placed: dict[str, str] | None = None) -> None:
        self._shards = sorted(shards, key=lambda s: s.name)
        self._first = shards[0]
        self.placed = dict(placed or {})

    def shards(self) -> list[Shard]:
        return list(self._shards)

    def shard_of(self, namespace: str) -> Shard:
        name = self.placed.get(namespace)
        if name is None:
            raise NotFound(f"namespace {namespace} does not exist")
        return next(s for s in self._shards if s.name == name)

    def refresh(self, namespace: str) -> None:
        """Nothing is cached."""

    def place(self, namespace: str, shard: str | None = None) -> Shard:
        if namespace in self.placed:
            raise AlreadyExists(f"namespace {namespace} exists")
        self.placed[namespace] = shard or self._first.name
        return self.shard_of(namespace)

    def close(self) -> None:
        """Nothing is held."""


def main(argv: list[str]) -> int:
    from indexer.logs import configure
    from indexer.worker import Worker, WorkerConfig

    alias, partitions, es_url, *pairs = argv
    shards = [Shard(*pair.split("=", 1)) for pair in pairs]
    configure()
    config = WorkerConfig(database_url=shards[0].url, es_url=es_url, alias=alias,
                          partitions=int(partitions), poll_interval=0.2,
                          backoff_base=0.05, backoff_cap=0.5)
    return Worker(config, FixedShards(shards)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
