"""Which PostgreSQL server (a *shard*) holds which namespace.

Every Pathkeeper transaction touches one namespace, so a namespace can live on any server
that has the schema, and each server keeps the log protocol unchanged (docs/sharding.md).
``ShardMap`` is the one question every caller asks: where is this namespace. A
deployment with one server answers it with ``SingleShard`` (no directory, no
configuration); several servers are named by a directory database (``DirectoryMap``,
``coordinator/shard_directory.py``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Engine, text

from .db import connect_engine, translated
from .errors import InvalidArgument, InvalidConfiguration, NamespaceFrozen, NamespaceMoved
from .settings import Settings

#: The name of the one shard of a deployment without a directory, and of the first
#: server of a directory made from it (``pathkeeper shard init``).
DEFAULT_SHARD = "default"


#: A shard's URL written ``env:NAME`` is read from the variable NAME when it is used, so
#: the directory need not hold a password.
URL_FROM_ENV = "env:"


@dataclass(frozen=True)
class Shard:
    """One PostgreSQL server (a database) holding whole namespaces."""

    name: str
    url: str

    def database_url(self) -> str:
        """``url``, or the value of the variable an ``env:NAME`` url names."""
        if not self.url.startswith(URL_FROM_ENV):
            return self.url
        var = self.url.removeprefix(URL_FROM_ENV)
        value = os.environ.get(var)
        if not value:
            raise InvalidConfiguration(
                f"shard {self.name}'s URL is read from ${var}, which is not set")
        return value


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

    def forget(self, namespace: str) -> None:
        """Remove the placement of a namespace that was dropped from its shard."""
        ...

    def namespaces(self) -> list[str]:
        """Every namespace placed, by name."""
        ...

    def engine(self, shard: Shard) -> Engine:
        """The pooled engine of ``shard`` (one per shard, made on first use)."""
        ...

    def keys_engine(self) -> Engine:
        """The database that holds the HTTP API's keys: the directory's, or the one
        server's (a key may name namespaces of several shards)."""
        ...

    def close(self) -> None:
        ...


def rerouted(shard_map: ShardMap, namespace: str, tried: Shard,
             refusal: NamespaceMoved | NamespaceFrozen) -> Shard:
    """The shard to run a call once more on, after ``tried`` refused it with
    ``refusal``; or ``refusal`` raised. The one rule for every caller (``Coordinator``,
    ``AsyncStatements``): the map is read again; if it names another shard, the move
    has flipped (its epoch changed) and the call runs there, once; if it names the same
    one, the namespace is frozen there (a move in flight) or the move stopped halfway,
    and the caller gets the refusal (HTTP 503 with Retry-After)."""
    shard_map.refresh(namespace)
    shard = shard_map.shard_of(namespace)
    if shard == tried:
        raise refusal
    return shard


class SingleShard:
    """Every namespace on one server: the map of a deployment with no directory. Its
    engine is ``engine`` if given (the caller's, closed with the map), else made on first
    use with ``settings``' pool and session limits."""

    def __init__(self, url: str, name: str = DEFAULT_SHARD, *, engine: Engine | None = None,
                 settings: Settings | None = None,
                 statement_timeout: float | None = None) -> None:
        self.shard = Shard(name, url)
        self._engine = engine
        self._settings = settings or Settings()
        self._statement_timeout = statement_timeout
        self._lock = threading.Lock()

    def shards(self) -> list[Shard]:
        return [self.shard]

    def engine(self, shard: Shard) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = connect_engine(self.shard.database_url(), self._settings,
                                              self._statement_timeout)
            return self._engine

    def keys_engine(self) -> Engine:
        return self.engine(self.shard)

    def namespaces(self) -> list[str]:
        with translated(), self.engine(self.shard).connect() as conn:
            return list(conn.execute(text("SELECT name FROM namespaces ORDER BY name")).scalars())

    def forget(self, namespace: str) -> None:
        """The server's own row was the placement."""

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
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
