"""Which PostgreSQL server (a *shard*) holds which namespace.

Every Pathkeeper transaction touches one namespace, so a namespace can live on any server
that has the schema, and each server keeps the log protocol unchanged (docs/sharding.md).
``ShardMap`` is the one question every caller asks: where is this namespace. A
deployment with one server answers it with ``SingleShard`` (no directory, no
configuration); several servers are named by a directory database (``DirectoryMap``,
``coordinator/shard_directory.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .errors import InvalidArgument

#: The name of the one shard of a deployment without a directory, and of the first
#: server of a directory made from it (``pathkeeper shard init``).
DEFAULT_SHARD = "default"


@dataclass(frozen=True)
class Shard:
    """One PostgreSQL server (a database) holding whole namespaces."""

    name: str
    url: str


class ShardMap(Protocol):
    """Where each namespace lives. Implementations cache; a caller that met
    ``NamespaceMoved`` on the shard it was given calls ``refresh`` and asks again."""

    def shards(self) -> list[Shard]:
        """Every shard, in a stable order (by name)."""
        ...

    def shard_of(self, namespace: str) -> Shard:
        """The shard that holds ``namespace`` (``NotFound`` if the map knows none:
        the namespace does not exist)."""
        ...

    def refresh(self, namespace: str) -> None:
        """Forget what is cached about ``namespace``; the next ``shard_of`` reads the map."""
        ...

    def place(self, namespace: str, shard: str | None = None) -> Shard:
        """Choose (``shard`` named, or the configured rule) and record the shard of a
        namespace being created; ``AlreadyExists`` if it is placed already."""
        ...

    def close(self) -> None:
        ...


class SingleShard:
    """Every namespace on one server: the map of a deployment with no directory."""

    def __init__(self, url: str, name: str = DEFAULT_SHARD) -> None:
        self.shard = Shard(name, url)

    def shards(self) -> list[Shard]:
        return [self.shard]

    def shard_of(self, namespace: str) -> Shard:
        return self.shard

    def refresh(self, namespace: str) -> None:
        """Nothing is cached."""

    def place(self, namespace: str, shard: str | None = None) -> Shard:
        if shard is not None and shard != self.shard.name:
            raise InvalidArgument(
                f"no shard {shard}: this deployment has one database server ({self.shard.name})")
        return self.shard

    def close(self) -> None:
        """Nothing is held."""
