"""``DirectoryMap``: the shard map of a deployment with several database servers, read
from a directory database (``migrations_directory/``, docs/sharding.md section 1).

What it keeps, and for how long:

- ``namespace -> (shard, epoch)``, cached without expiry: an entry is dropped when a
  shard refused a call for it (``refresh``, from ``shard_map.rerouted``) and when the
  directory says its placement changed: a thread LISTENs on ``pathkeeper_placements``
  (a trigger on ``placements`` sends it at the COMMIT of any change: a move's flip, a
  drop, a hand edit), and drops the whole cache whenever it (re)connects, since it may
  have missed some while it was away.
- the shards (name, URL, ``accepts_new``), read at start and again when a placement
  names a shard it does not know (one added since by ``pathkeeper shard add``);
- one pooled engine per shard, made on first use with the coordinator's settings;
- the load estimate of the placement rule, per shard, for ``load_cache_seconds``.

Placing a namespace (``place``) inserts its directory row: the row is the claim (a second
create of the name finds it), the namespace is created on the shard after it
(``Coordinator.create_namespace``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from .db import connect_engine, libpq_url, parse_database_url, translate, translated
from .errors import AlreadyExists, InvalidArgument, InvalidConfiguration, NotFound
from .settings import LEAST_LOADED, Settings
from .shard_map import Shard

log = logging.getLogger("pathkeeper.shards")

#: The channel the directory's trigger notifies on, with the namespace as payload.
PLACEMENTS_CHANNEL = "pathkeeper_placements"

#: The shard with the fewest nodes: ``pg_class.reltuples`` of ``nodes`` (the planner's
#: estimate, -1 before the table was first analyzed), read on the shard.
_NODES_ESTIMATE_SQL = text(
    "SELECT coalesce(max(greatest(reltuples, 0)), 0) FROM pg_class "
    "WHERE oid = to_regclass('nodes')")


@dataclass(frozen=True)
class ShardInfo:
    """A row of the directory's ``shards``."""

    shard: Shard
    accepts_new: bool
    namespaces: int


class DirectoryMap:
    """The ``ShardMap`` read from a directory database. Thread-safe: share one per
    process (through its ``Coordinator``).

    ``placement``: the rule for a namespace created without a shard: ``least_loaded``
    (the shard taking new namespaces with the fewest nodes, an estimate cached for
    ``load_cache_seconds``; ties go to the one with fewer namespaces, then by name) or
    a shard's name. ``listen=False`` leaves out the LISTEN thread: a stale entry is then
    dropped only when its shard refuses a call (for tests of that path)."""

    def __init__(self, directory_url: str, settings: Settings | None = None, *,
                 statement_timeout: float | None = None, placement: str | None = None,
                 load_cache_seconds: float = 60.0, listen: bool = True) -> None:
        self.settings = settings or Settings()
        self.placement = placement or self.settings.placement
        self.load_cache_seconds = load_cache_seconds
        self._statement_timeout = statement_timeout
        url = parse_database_url(directory_url).render_as_string(hide_password=False)
        # A small pool: the directory is read on a cache miss, a create, a drop.
        self.directory = connect_engine(url, Settings(
            lock_timeout=self.settings.lock_timeout, pool_size=2, max_overflow=8,
            pool_timeout=self.settings.pool_timeout,
            connect_timeout=self.settings.connect_timeout), statement_timeout)
        self._lock = threading.Lock()
        self._placed: dict[str, tuple[Shard, int]] = {}
        #: +1 at every drop of an entry: a placement read from the directory is cached
        #: only if none happened since the read began (else the drop may be of a change
        #: committed after the read, and the read's answer stale).
        self._drops = 0
        self._shards: dict[str, ShardInfo] = {}
        self._engines: dict[str, Engine] = {}
        self._loads: tuple[float, dict[str, float]] | None = None
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        try:
            self._read_shards()
        except BaseException:
            self.directory.dispose()
            raise
        if listen:
            self._listener = threading.Thread(
                target=self._listen, args=(libpq_url(url),), name="pathkeeper-placements",
                daemon=True)
            self._listener.start()

    # ---------------------------------------------------------------- ShardMap

    def shards(self) -> list[Shard]:
        with self._lock:
            return [info.shard for _, info in sorted(self._shards.items())]

    def shard_of(self, namespace: str) -> Shard:
        return self.placement_of(namespace)[0]

    def placement_of(self, namespace: str) -> tuple[Shard, int]:
        """The shard of ``namespace`` and the epoch of its placement (+1 at each move)."""
        with self._lock:
            cached = self._placed.get(namespace)
            drops = self._drops
        if cached is not None:
            return cached
        with translated(), self.directory.connect() as conn:
            row = conn.execute(text(
                "SELECT shard, epoch FROM placements WHERE namespace = :ns"),
                {"ns": namespace}).one_or_none()
        if row is None:
            raise NotFound(f"namespace {namespace!r} does not exist")
        placed = (self._shard(row.shard), int(row.epoch))
        with self._lock:
            if self._drops == drops:
                self._placed[namespace] = placed
        return placed

    def refresh(self, namespace: str) -> None:
        with self._lock:
            self._placed.pop(namespace, None)
            self._drops += 1

    def place(self, namespace: str, shard: str | None = None) -> Shard:
        chosen = self._shard(shard) if shard is not None else self._by_rule()
        try:
            with self.directory.begin() as conn:
                conn.execute(text(
                    "INSERT INTO placements (namespace, shard) VALUES (:ns, :shard)"),
                    {"ns": namespace, "shard": chosen.name})
        except IntegrityError as exc:
            raise AlreadyExists(f"namespace {namespace!r} is placed already") from exc
        except DBAPIError as exc:
            raise translate(exc) from exc
        return chosen

    def forget(self, namespace: str) -> None:
        """Remove the placement, unless a move of the namespace is in flight (its row
        is the mover's to finish or undo)."""
        with translated(), self.directory.begin() as conn:
            conn.execute(text(
                "DELETE FROM placements p WHERE namespace = :ns "
                "AND NOT EXISTS (SELECT 1 FROM moves m WHERE m.namespace = p.namespace)"),
                {"ns": namespace})
        self.refresh(namespace)

    def namespaces(self) -> list[str]:
        with translated(), self.directory.connect() as conn:
            return list(conn.execute(text(
                "SELECT namespace FROM placements ORDER BY namespace")).scalars())

    def engine(self, shard: Shard) -> Engine:
        with self._lock:
            engine = self._engines.get(shard.name)
            if engine is None:
                engine = connect_engine(shard.database_url(), self.settings,
                                        self._statement_timeout)
                self._engines[shard.name] = engine
            return engine

    def keys_engine(self) -> Engine:
        return self.directory

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=5)
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.dispose()
        self.directory.dispose()

    def __enter__(self) -> DirectoryMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the directory

    def shard_infos(self) -> list[ShardInfo]:
        """Every shard as the directory has it now, with its number of namespaces."""
        self._read_shards()
        with self._lock:
            return [info for _, info in sorted(self._shards.items())]

    def _read_shards(self) -> None:
        with translated(), self.directory.connect() as conn:
            rows = conn.execute(text(
                "SELECT s.name, s.url, s.accepts_new, count(p.namespace) AS namespaces "
                "FROM shards s LEFT JOIN placements p ON p.shard = s.name "
                "GROUP BY s.name, s.url, s.accepts_new")).all()
        infos = {r.name: ShardInfo(Shard(r.name, r.url), r.accepts_new, int(r.namespaces))
                 for r in rows}
        with self._lock:
            self._shards = infos

    def _shard(self, name: str) -> Shard:
        """The shard named ``name``; the directory is read again for a name not known
        yet (a shard added since), and an unknown one is ``InvalidArgument``."""
        with self._lock:
            info = self._shards.get(name)
        if info is None:
            self._read_shards()
            with self._lock:
                info = self._shards.get(name)
        if info is None:
            raise InvalidArgument(f"no shard named {name!r} in the directory")
        return info.shard

    def _by_rule(self) -> Shard:
        if self.placement != LEAST_LOADED:
            return self._shard(self.placement)
        infos = [info for info in self.shard_infos() if info.accepts_new]
        if not infos:
            raise InvalidConfiguration("no shard takes new namespaces (accepts_new)")
        loads = self._nodes_estimates([info.shard for info in infos])
        best = min(infos, key=lambda i: (loads.get(i.shard.name, 0.0), i.namespaces,
                                         i.shard.name))
        return best.shard

    def _nodes_estimates(self, shards: list[Shard]) -> dict[str, float]:
        """Nodes per shard, estimated; cached ``load_cache_seconds`` (an estimate is
        enough to spread the load, and reading every shard at each create is not)."""
        now = time.monotonic()
        with self._lock:
            cached = self._loads
        if (cached is not None and now - cached[0] < self.load_cache_seconds
                and all(s.name in cached[1] for s in shards)):
            return cached[1]
        loads: dict[str, float] = {}
        for shard in shards:
            with translated(), self.engine(shard).connect() as conn:
                loads[shard.name] = float(conn.execute(_NODES_ESTIMATE_SQL).scalar_one())
        with self._lock:
            self._loads = (now, loads)
        return loads

    def _listen(self, url: str) -> None:
        """Drop a namespace's entry when the directory says its placement changed."""
        delay = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {PLACEMENTS_CHANNEL}")
                    delay = 0.1
                    with self._lock:  # what changed while away is unknown: forget all
                        self._placed.clear()
                        self._drops += 1
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self.refresh(note.payload)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                log.warning("the placements listener lost its connection: %s", exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
