"""Making and checking a directory of database servers (``pathkeeper shard init|add|list|
check``, docs/sharding.md section 1): the operations on the directory as a whole, apart
from ``DirectoryMap``, which is what every call reads.

- ``init_directory``: a directory made from one server as it is: the server is the shard
  ``default``, each of its namespaces placed there, its API keys copied (with a
  directory they live there).
- ``add_shard``: a server joins, if its schema is at the same migration as every other
  shard's and it holds no namespace.
- ``check``: what the directory and the shards disagree on: a placement whose namespace
  is absent on its shard (a create or a drop that stopped between the two writes), a
  namespace on a shard that the directory does not place there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, create_engine, pool, text

from .db import parse_database_url, translated
from .errors import AlreadyExists, InvalidArgument, InvalidConfiguration
from .migrate import current_revision, head_revision, require_current
from .migrate import upgrade_directory as migrate_directory
from .shard_directory import DirectoryMap
from .shard_map import DEFAULT_SHARD, Shard

#: A shard's name, as the directory's ``ck_shards_name`` checks it.
SHARD_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


@contextmanager
def _connection(url: str) -> Iterator[Connection]:
    """One connection of its own (no pool: these are one-off operator commands)."""
    engine = create_engine(parse_database_url(url), poolclass=pool.NullPool)
    try:
        with translated(), engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def _engine(url: str) -> Engine:
    return create_engine(parse_database_url(url), poolclass=pool.NullPool)


def _holds_shard_schema(conn: Connection) -> bool:
    return conn.execute(text(
        "SELECT to_regclass('alembic_version') IS NOT NULL "
        "OR to_regclass('namespaces') IS NOT NULL")).scalar_one() is True


def init_directory(directory_url: str, database_url: str, stored_url: str | None = None
                   ) -> int:
    """Make the directory at ``directory_url`` (migrated here) from the server at
    ``database_url``, which becomes the shard ``default`` (recorded with ``stored_url``,
    e.g. ``env:PATHKEEPER_DATABASE_URL``, or with ``database_url`` itself). Returns the
    number of namespaces placed. Refused if the directory's database holds a shard's
    schema, or has shards already."""
    server = _engine(database_url)
    try:
        require_current(server)
    finally:
        server.dispose()
    with _connection(directory_url) as conn:
        if _holds_shard_schema(conn):
            raise InvalidConfiguration(
                "the directory's database holds a shard's schema: the directory needs a "
                "database of its own (it may be on the same server)")
    migrate_directory(directory_url)
    with _connection(database_url) as src:
        namespaces = list(src.execute(text("SELECT name FROM namespaces ORDER BY name"))
                          .scalars())
        keys = [dict(row._mapping) for row in src.execute(text(
            "SELECT id, key_hash, namespaces, scope, label, created_at, revoked_at "
            "FROM api_keys"))]
    with _connection(directory_url) as conn:
        # One transaction: a second init, or one racing this, finds the shard.
        conn.execute(text("LOCK TABLE shards IN EXCLUSIVE MODE"))
        if conn.execute(text("SELECT count(*) FROM shards")).scalar_one():
            raise AlreadyExists(
                "the directory has shards already (add a server with: shard add NAME URL)")
        conn.execute(text("INSERT INTO shards (name, url) VALUES (:name, :url)"),
                     {"name": DEFAULT_SHARD, "url": stored_url or database_url})
        if namespaces:
            conn.execute(text("INSERT INTO placements (namespace, shard) VALUES (:ns, :s)"),
                         [{"ns": ns, "s": DEFAULT_SHARD} for ns in namespaces])
        if keys:
            conn.execute(text(
                "INSERT INTO api_keys (id, key_hash, namespaces, scope, label, created_at, "
                "revoked_at) VALUES (:id, :key_hash, :namespaces, :scope, :label, "
                ":created_at, :revoked_at)"), keys)
    return len(namespaces)


def add_shard(directory_url: str, name: str, url: str) -> str:
    """Record the server at ``url`` (as given: ``env:NAME`` is read from the variable) as
    the shard ``name``; returns the migration revision every shard is at. Refused unless
    its schema is at the revision of every other shard (and of this code), and it holds
    no namespace."""
    if not SHARD_NAME.fullmatch(name):
        raise InvalidArgument(
            f"a shard's name is 1-64 of a-z, 0-9, '_' and '-', starting with a letter or "
            f"digit: {name!r}")
    with DirectoryMap(directory_url, listen=False) as directory:
        shards = directory.shards()
        revisions = {shard.name: _revision(shard) for shard in shards}
    new = Shard(name, url)
    revision = _revision(new)
    head = head_revision()
    differing = {n: r for n, r in {**revisions, name: revision}.items() if r != head}
    if differing:
        listed = ", ".join(f"{n} at {r or 'none'}" for n, r in sorted(differing.items()))
        raise InvalidConfiguration(
            f"every shard's schema must be at this code's migration {head}: {listed} "
            "(run pathkeeper db upgrade on each)")
    with _connection(new.database_url()) as conn:
        held = conn.execute(text("SELECT count(*) FROM namespaces")).scalar_one()
    if held:
        raise InvalidConfiguration(
            f"the server of shard {name} holds {held} namespace(s): a new shard holds none "
            "(is it a shard already, under another URL?)")
    try:
        with _connection(directory_url) as conn:
            conn.execute(text("INSERT INTO shards (name, url) VALUES (:name, :url)"),
                         {"name": name, "url": url})
    except AlreadyExists as exc:
        raise AlreadyExists(f"the directory has a shard named {name} already") from exc
    return head


def _revision(shard: Shard) -> str | None:
    engine = _engine(shard.database_url())
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Finding:
    """A disagreement between the directory and a shard, for an operator."""

    shard: str
    namespace: str
    what: str

    def __str__(self) -> str:
        return f"{self.shard}: namespace {self.namespace!r} {self.what}"


def check(directory_url: str) -> list[Finding]:
    """What the directory and the shards disagree on, by shard and namespace. Namespaces
    of a move in flight (a ``moves`` row) are the mover's, and left out."""
    with DirectoryMap(directory_url, listen=False) as directory:
        shards = directory.shards()
        with translated(), directory.directory.connect() as conn:
            placed = {row.namespace: row.shard for row in conn.execute(text(
                "SELECT namespace, shard FROM placements"))}
            moving = set(conn.execute(text("SELECT namespace FROM moves")).scalars())
    found: list[Finding] = []
    for shard in shards:
        with _connection(shard.database_url()) as conn:
            here = set(conn.execute(text("SELECT name FROM namespaces")).scalars())
            gone = set(conn.execute(text(
                "SELECT namespace FROM namespace_placement WHERE state = 'gone'")).scalars())
        for ns in sorted(n for n, s in placed.items() if s == shard.name and n not in here):
            if ns not in moving:
                found.append(Finding(shard.name, ns, (
                    "is placed here but absent: a create that stopped halfway (create it "
                    "again to finish it, or drop it)")))
        for ns in sorted(here - moving):
            owner = placed.get(ns)
            if owner == shard.name:
                continue
            if owner is None:
                found.append(Finding(shard.name, ns, "is here with no directory row"))
            elif ns in gone:
                found.append(Finding(shard.name, ns, (
                    f"is left over here by its move to {owner} (the move's cleanup)")))
            else:
                found.append(Finding(shard.name, ns, f"is here but placed on {owner}"))
    return found
