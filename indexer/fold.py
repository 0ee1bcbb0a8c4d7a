"""Fold the event log into trees, one event at a time: the REFERENCE fold.

Replay, ``verify`` and snapshots use ``indexer.setfold`` (the same fold done by
PostgreSQL set at a time, an order of magnitude faster); this sequential fold is kept
as the definition it is tested against (``tests/replay/test_setfold.py``,
``tests/reliability``) and for callers that fold events they hold in memory.

Event semantics: ``coordinator.events``, where every event and its payload is
defined. Events that cannot be decoded (an unknown type or payload version, a
malformed payload) are anomalies, like events that do not fit the tree.

Two interchangeable backends per namespace: ``MemoryTree`` (dicts) and
``SpilledTree`` (a temporary PostgreSQL table keyed by ``(namespace, id)``).
``Folder`` starts every namespace in memory and moves one to PostgreSQL when it
grows past ``spill_threshold`` nodes, so memory stays bounded however large a
namespace is. Payload ``path`` fields are never trusted: paths are recomputed
from the folded tree, so a corrupt path in the log shows up as a difference.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

from sqlalchemy import Connection, Engine, text

from coordinator import Event, Node
from coordinator.db import streamed
from coordinator.errors import InvalidEvent
from coordinator.events import (
    Created,
    Deleted,
    MetadataSet,
    Moved,
    NamespaceCreated,
    NamespaceDropped,
    NodeEvent,
    Written,
)
from coordinator.tree import node_of

#: Above this many nodes a namespace is folded in PostgreSQL instead of a dict
#: (a node in memory costs roughly 300 bytes plus its content).
DEFAULT_SPILL_THRESHOLD = 500_000

MAX_ANOMALIES_KEPT = 100


class FoldError(Exception):
    """The event log is inconsistent (strict folds raise; others record an anomaly)."""


@dataclass(slots=True)
class NodeState:
    """One node as the log says it is: everything but its path."""

    parent_id: str | None
    name: str
    kind: str
    content: str | None
    metadata: dict[str, Any]
    version: int


@dataclass
class Anomalies:
    """Inconsistencies met while folding: the first few in full, and a count."""

    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.first) < MAX_ANOMALIES_KEPT:
            self.first.append(message)


class Tree(Protocol):
    """One namespace's folded tree."""

    namespace: str

    def __len__(self) -> int: ...

    def apply(self, position: int, change: NodeEvent) -> None:
        """Apply one event of this namespace, at ``position`` (for anomaly messages)."""

    def nodes(self) -> Iterator[Node]:
        """Every live node, root included, with its full path (in no promised order)."""

    def nodes_by_id(self) -> Iterator[Node]:
        """Every live node, root included, with its path, sorted by id (as text)."""

    def close(self) -> None: ...


def _root_state() -> NodeState:
    return NodeState(None, "", "dir", None, {}, 1)


def _child_path(parent_path: str, name: str) -> str:
    return f"/{name}" if parent_path == "/" else f"{parent_path}/{name}"


class MemoryTree:
    """A namespace folded into dicts: ``id -> NodeState`` and ``parent -> children``."""

    def __init__(self, namespace: str, root_id: str, anomalies: Anomalies) -> None:
        self.namespace = namespace
        self.root_id = root_id
        self.anomalies = anomalies
        self.state: dict[str, NodeState] = {root_id: _root_state()}
        self.children: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self.state)

    def _link(self, node_id: str, parent_id: str) -> None:
        self.children.setdefault(parent_id, set()).add(node_id)

    def _unlink(self, node_id: str, parent_id: str | None) -> None:
        if parent_id is None:
            return
        siblings = self.children.get(parent_id)
        if siblings is not None:
            siblings.discard(node_id)
            if not siblings:
                del self.children[parent_id]

    def apply(self, position: int, change: NodeEvent) -> None:
        node_id = change.id
        where = f"position {position} ({change.TYPE} {node_id})"
        if isinstance(change, Created):
            if node_id in self.state:
                self.anomalies.add(f"{where}: node already exists")
            parent = change.parent_id
            if parent not in self.state:
                self.anomalies.add(f"{where}: parent {parent} does not exist")
            self.state[node_id] = NodeState(
                parent, change.name, change.kind, change.content, dict(change.metadata),
                change.version,
            )
            self._link(node_id, parent)
            return
        node = self.state.get(node_id)
        if node is None:  # every other event changes a node that exists
            self.anomalies.add(f"{where}: no such node")
            return
        match change:
            case Written():
                node.content = change.content
                if change.metadata is not None:
                    node.metadata = dict(change.metadata)
                node.version = change.version
            case MetadataSet():
                node.metadata = dict(change.metadata)
                node.version = change.version
            case Moved():
                parent = change.parent_id
                if parent not in self.state:
                    self.anomalies.add(f"{where}: destination {parent} does not exist")
                self._unlink(node_id, node.parent_id)
                node.parent_id, node.name, node.version = parent, change.name, change.version
                self._link(node_id, parent)
            case Deleted():
                self._unlink(node_id, node.parent_id)
                stack = [node_id]
                while stack:  # iterative: trees can be deeper than Python's recursion limit
                    current = stack.pop()
                    self.state.pop(current, None)
                    stack.extend(self.children.pop(current, ()))
            case _:
                assert_never(change)

    def _walk(self) -> Iterator[tuple[str, NodeState, str]]:
        stack: list[tuple[str, str]] = [(self.root_id, "/")]
        seen = 0
        while stack:
            node_id, path = stack.pop()
            node = self.state.get(node_id)
            if node is None:
                continue
            seen += 1
            yield node_id, node, path
            for child in self.children.get(node_id, ()):
                child_node = self.state.get(child)
                if child_node is not None:
                    stack.append((child, _child_path(path, child_node.name)))
        if seen != len(self.state):
            self.anomalies.add(
                f"namespace {self.namespace}: {len(self.state) - seen} nodes are not "
                "reachable from the root"
            )

    def _node(self, node_id: str, st: NodeState, path: str) -> Node:
        return Node(
            id=node_id, namespace=self.namespace, parent_id=st.parent_id, name=st.name,
            kind=st.kind, version=st.version, path=path, content=st.content,
            metadata=st.metadata,
        )

    def nodes(self) -> Iterator[Node]:
        for node_id, st, path in self._walk():
            yield self._node(node_id, st, path)

    def nodes_by_id(self) -> Iterator[Node]:
        # Paths first (one walk), then sort: memory is O(namespace), which is what this
        # backend is for; large namespaces live in SpilledTree.
        paths = {node_id: path for node_id, _, path in self._walk()}
        for node_id in sorted(paths):
            yield self._node(node_id, self.state[node_id], paths[node_id])

    def close(self) -> None:
        self.state.clear()
        self.children.clear()


# A TEMPORARY table: like UNLOGGED it writes no WAL, and the server drops it when the
# session ends, even after kill -9 of the replay, so a crash leaks nothing.
SPILL_DDL = """
CREATE TEMPORARY TABLE IF NOT EXISTS pathkeeper_fold (
    namespace text NOT NULL,
    id uuid NOT NULL,
    parent_id uuid,
    name text NOT NULL,
    kind text NOT NULL,
    content text,
    metadata jsonb NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (namespace, id)
)
"""
SPILL_INDEX = (
    "CREATE INDEX IF NOT EXISTS pathkeeper_fold_parent ON pathkeeper_fold (namespace, parent_id)"
)
INSERT_SQL = text(
    "INSERT INTO pathkeeper_fold (namespace, id, parent_id, name, kind, content, metadata, "
    "version) VALUES (:ns, :id, :parent, :name, :kind, :content, CAST(:md AS jsonb), :version) "
    "ON CONFLICT (namespace, id) DO UPDATE SET parent_id = EXCLUDED.parent_id, "
    "name = EXCLUDED.name, kind = EXCLUDED.kind, content = EXCLUDED.content, "
    "metadata = EXCLUDED.metadata, version = EXCLUDED.version"
)
WALK_SQL = """
WITH RECURSIVE sub AS (
    SELECT id, parent_id, name, kind, content, metadata, version, CAST('/' AS text) AS path
    FROM pathkeeper_fold WHERE namespace = :ns AND id = :root
  UNION ALL
    SELECT n.id, n.parent_id, n.name, n.kind, n.content, n.metadata, n.version,
           CASE WHEN s.path = '/' THEN '/' || n.name ELSE s.path || '/' || n.name END
    FROM sub s JOIN pathkeeper_fold n ON n.namespace = :ns AND n.parent_id = s.id
)
SELECT * FROM sub
"""


class SpilledTree:
    """A namespace folded into a temporary PostgreSQL table on a dedicated connection.

    Consecutive ``created`` events are buffered and inserted together; any other
    event flushes the buffer first, so statements run in log order. Every write
    commits at once: no transaction stays open (and holds back vacuum) for the
    length of a replay. (Log readers would not wait for it either way: they wait
    only for writers of the event log, see ``coordinator.eventlog``.)
    """

    BUFFER = 2000

    def __init__(
        self, namespace: str, root_id: str, conn: Connection, anomalies: Anomalies
    ) -> None:
        self.namespace = namespace
        self.root_id = root_id
        self.conn = conn
        self.anomalies = anomalies
        self._pending: list[dict[str, Any]] = []
        self._count = 0
        conn.execute(text(SPILL_DDL))
        conn.execute(text(SPILL_INDEX))
        conn.execute(text("DELETE FROM pathkeeper_fold WHERE namespace = :ns"), {"ns": namespace})
        conn.commit()
        self._insert([self._row(root_id, _root_state())])

    @classmethod
    def from_memory(cls, tree: MemoryTree, conn: Connection) -> SpilledTree:
        """Move ``tree``'s nodes into PostgreSQL (``tree`` is emptied)."""
        spilled = cls(tree.namespace, tree.root_id, conn, tree.anomalies)
        batch: list[dict[str, Any]] = []
        for node_id, st in tree.state.items():
            if node_id != tree.root_id:
                batch.append(spilled._row(node_id, st))
            if len(batch) >= cls.BUFFER:
                spilled._insert(batch)
                batch = []
        spilled._insert(batch)
        tree.close()
        return spilled

    def _row(self, node_id: str, st: NodeState) -> dict[str, Any]:
        return {
            "ns": self.namespace, "id": node_id, "parent": st.parent_id, "name": st.name,
            "kind": st.kind, "content": st.content,
            "md": json.dumps(st.metadata, ensure_ascii=False), "version": st.version,
        }

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.conn.execute(INSERT_SQL, rows)
            self.conn.commit()
            self._count += len(rows)

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        self._insert(pending)

    def __len__(self) -> int:
        self.flush()
        return self._count

    def apply(self, position: int, change: NodeEvent) -> None:
        node_id = change.id
        where = f"position {position} ({change.TYPE} {node_id})"
        if isinstance(change, Created):
            # Existence checks of the parent are skipped here (one query per event);
            # verify's comparison with the nodes table catches a dangling parent.
            self._pending.append(self._row(node_id, NodeState(
                change.parent_id, change.name, change.kind, change.content,
                dict(change.metadata), change.version,
            )))
            if len(self._pending) >= self.BUFFER:
                self.flush()
            return
        self.flush()
        params: dict[str, Any] = {"ns": self.namespace, "id": node_id}
        match change:
            case Written():
                md = change.metadata
                changed = self.conn.execute(
                    text(
                        "UPDATE pathkeeper_fold SET content = :content, "
                        "metadata = COALESCE(CAST(:md AS jsonb), metadata), "
                        "version = :version WHERE namespace = :ns AND id = :id"
                    ),
                    {**params, "content": change.content, "version": change.version,
                     "md": None if md is None else json.dumps(md, ensure_ascii=False)},
                ).rowcount
            case MetadataSet():
                changed = self.conn.execute(
                    text(
                        "UPDATE pathkeeper_fold SET metadata = CAST(:md AS jsonb), "
                        "version = :version WHERE namespace = :ns AND id = :id"
                    ),
                    {**params, "version": change.version,
                     "md": json.dumps(change.metadata, ensure_ascii=False)},
                ).rowcount
            case Moved():
                changed = self.conn.execute(
                    text(
                        "UPDATE pathkeeper_fold SET parent_id = :parent, name = :name, "
                        "version = :version WHERE namespace = :ns AND id = :id"
                    ),
                    {**params, "parent": change.parent_id, "name": change.name,
                     "version": change.version},
                ).rowcount
            case Deleted():
                changed = self.conn.execute(
                    text(
                        """
                        WITH RECURSIVE sub(id) AS (
                            SELECT CAST(:id AS uuid)
                          UNION
                            SELECT n.id FROM sub s JOIN pathkeeper_fold n
                              ON n.namespace = :ns AND n.parent_id = s.id
                        )
                        DELETE FROM pathkeeper_fold
                        WHERE namespace = :ns AND id IN (SELECT id FROM sub)
                        """
                    ),
                    params,
                ).rowcount
                self._count -= changed
            case _:
                assert_never(change)
        self.conn.commit()
        if changed == 0:
            self.anomalies.add(f"{where}: no such node")

    def _stream(self, sql: str) -> Iterator[Node]:
        self.flush()
        # The caller may idle between fetches (loading Elasticsearch): not a hung client.
        self.conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        params = {"ns": self.namespace, "root": self.root_id}
        try:
            for r in streamed(self.conn, text(sql), params, 2000):
                yield node_of(self.namespace, r, r.path)
        finally:
            self.conn.rollback()  # a read-only transaction: nothing to keep

    def nodes(self) -> Iterator[Node]:
        return self._stream(WALK_SQL)

    def nodes_by_id(self) -> Iterator[Node]:
        # uuid order is byte order, which is the order of the lowercase hex text too.
        return self._stream(f"SELECT * FROM ({WALK_SQL}) AS walked ORDER BY id")

    def close(self) -> None:
        self._pending = []
        self.conn.execute(
            text("DELETE FROM pathkeeper_fold WHERE namespace = :ns"), {"ns": self.namespace}
        )
        self.conn.commit()


class Folder:
    """Folds events of any number of namespaces; each namespace in memory until it
    grows past ``spill_threshold`` nodes, then in PostgreSQL (needs ``engine``).
    Many namespaces together are bounded too: when the nodes held in memory
    exceed ``memory_budget`` (checked every ``BUDGET_CHECK`` events), the largest
    in-memory namespace is spilled."""

    BUDGET_CHECK = 10_000

    def __init__(
        self,
        engine: Engine | None = None,
        spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
        strict: bool = False,
        memory_budget: int | None = None,
    ) -> None:
        self.engine = engine
        self.spill_threshold = spill_threshold
        self.memory_budget = memory_budget if memory_budget is not None else 2 * spill_threshold
        self.strict = strict
        self.trees: dict[str, Tree] = {}
        self.anomalies = Anomalies()
        self.events = 0
        self.position = 0
        self._spill_conn: Connection | None = None
        self.on_spill: Callable[[str], None] | None = None

    def _conn(self) -> Connection:
        if self._spill_conn is None:
            if self.engine is None:
                raise FoldError("a namespace outgrew memory and no database was given to spill")
            self._spill_conn = self.engine.connect()
        return self._spill_conn

    def apply(self, event: Event) -> None:
        """Apply one event (events must come in log position order)."""
        before = self.anomalies.count
        self.events += 1
        self.position = event.position
        ns = event.namespace
        try:
            change = event.change
        except InvalidEvent as exc:
            self.anomalies.add(f"position {event.position}: {exc}")
        else:
            match change:
                case NamespaceCreated():
                    if ns in self.trees:
                        self.anomalies.add(f"position {event.position}: namespace {ns} exists")
                        self.trees.pop(ns).close()
                    self.trees[ns] = MemoryTree(ns, change.root_id, self.anomalies)
                case NamespaceDropped():
                    tree = self.trees.pop(ns, None)
                    if tree is None:
                        self.anomalies.add(f"position {event.position}: no namespace {ns} to drop")
                    else:
                        tree.close()
                case Created() | Written() | MetadataSet() | Moved() | Deleted():
                    found = self.trees.get(ns)
                    if found is None:
                        self.anomalies.add(
                            f"position {event.position}: event in unknown namespace {ns}"
                        )
                    else:
                        found.apply(event.position, change)
                        if isinstance(found, MemoryTree) and len(found) > self.spill_threshold:
                            self._spill(ns)
                case _:
                    assert_never(change)
        if self.events % self.BUDGET_CHECK == 0:
            self._keep_budget()
        if self.strict and self.anomalies.count > before:
            raise FoldError(self.anomalies.first[-1])

    def _spill(self, ns: str) -> None:
        tree = self.trees[ns]
        assert isinstance(tree, MemoryTree)
        self.trees[ns] = SpilledTree.from_memory(tree, self._conn())
        if self.on_spill is not None:
            self.on_spill(ns)

    def _keep_budget(self) -> None:
        in_memory = {ns: len(t) for ns, t in self.trees.items() if isinstance(t, MemoryTree)}
        total = sum(in_memory.values())
        for ns in sorted(in_memory, key=lambda n: in_memory[n], reverse=True):
            if total <= self.memory_budget:
                return
            total -= in_memory[ns]
            self._spill(ns)

    def fold(self, events: Iterable[Event]) -> Folder:
        for event in events:
            self.apply(event)
        return self

    def namespaces(self) -> list[str]:
        return sorted(self.trees)

    def node_count(self) -> int:
        """Live nodes, roots included."""
        return sum(len(t) for t in self.trees.values())

    def spilled(self) -> list[str]:
        return sorted(ns for ns, t in self.trees.items() if isinstance(t, SpilledTree))

    def close(self) -> None:
        trees, self.trees = list(self.trees.values()), {}
        conn, self._spill_conn = self._spill_conn, None
        try:
            for tree in trees:
                tree.close()
        finally:
            if conn is not None:
                conn.close()  # the temporary table goes with the session

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fold(events: Iterable[Event], **kwargs: Any) -> Folder:
    """Fold ``events`` (in position order) into a new ``Folder``."""
    return Folder(**kwargs).fold(events)

