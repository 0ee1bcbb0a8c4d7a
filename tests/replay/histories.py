"""Random valid event histories, written straight into ``events``, for comparing folds.

A small model of namespaces (mkdir, create, write with and without metadata, rename,
move across directories, recursive delete, drop and re-create a namespace) emits the
events the coordinator would (``coordinator.events``; every other transaction without
payload versions, as logs written before they existed), in blocks of positions like its
transactions. Each step is decoded from a tuple of integers, so hypothesis shrinks a
failing history to a short one. The moves are what make deletes hard: a node moved out
of a directory before the directory is deleted must survive, one moved into it must not.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, text

from coordinator import Event
from coordinator.events import (
    VERSION_KEY,
    Created,
    Deleted,
    DomainEvent,
    MetadataSet,
    Moved,
    NamespaceCreated,
    NamespaceDropped,
    Written,
    encode,
)
from coordinator.results import POSITION_BLOCK

NAMES = ["a", "b", "c", "d"]
_ids = itertools.count()


def _uuid() -> str:
    return str(uuid.UUID(int=(next(_ids) << 64) | uuid.uuid4().int >> 64))


@dataclass
class NsModel:
    root: str
    parent: dict[str, str | None] = field(default_factory=dict)
    name: dict[str, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)
    version: dict[str, int] = field(default_factory=dict)

    def children(self, node: str) -> list[str]:
        return sorted(n for n, p in self.parent.items() if p == node)

    def subtree(self, node: str) -> list[str]:
        out, stack = [], [node]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(self.children(n))
        return out

    def dirs(self) -> list[str]:
        return sorted(n for n, k in self.kind.items() if k == "dir")

    def free_name(self, parent: str, pick: int) -> str | None:
        taken = {self.name[c] for c in self.children(parent)}
        free = [n for n in NAMES if n not in taken]
        return free[pick % len(free)] if free else None


@dataclass
class History:
    events: list[Event] = field(default_factory=list)
    #: The last position of each transaction (the positions a reader can stop at).
    ends: list[int] = field(default_factory=list)


#: An event of a history as it is stored: (namespace, type, node_id, payload).
Wire = tuple[str, str, str, dict[str, Any]]


def wire(ns: str, change: DomainEvent) -> Wire:
    """``change`` as the coordinator would store it in ``ns``."""
    type_, node_id, payload = encode(change)
    return ns, type_, node_id, payload


def build(steps: list[tuple[int, int, int, int]], namespaces: list[str],
          first_block: int) -> History:
    """Decode ``steps`` into a history of ``namespaces`` starting at block ``first_block``."""
    hist = History()
    block = first_block
    models: dict[str, NsModel] = {}
    now = datetime.now(UTC)

    def emit(tx: list[Wire]) -> None:
        nonlocal block
        if not tx:
            return
        block += 1 + len(hist.ends) % 3  # holes between blocks, like rolled back writers
        base = block * POSITION_BLOCK
        for i, (ns, type_, node, payload) in enumerate(tx):
            if len(hist.ends) % 2:  # as written before payloads had versions: both replay
                payload = {k: v for k, v in payload.items() if k != VERSION_KEY}
            hist.events.append(Event(base + i, ns, type_, node, payload, now))
        hist.ends.append(base + len(tx) - 1)

    def create_ns(ns: str) -> list[Wire]:
        root = _uuid()
        models[ns] = NsModel(root, {root: None}, {root: ""}, {root: "dir"}, {root: 1})
        return [wire(ns, NamespaceCreated(root_id=root))]

    for ns in namespaces:
        emit(create_ns(ns))
    for op, a, b, c in steps:
        ns = namespaces[a % len(namespaces)]
        m = models[ns]
        nodes = sorted(n for n in m.parent if n != m.root)
        tx: list[Wire] = []
        if op in (0, 1):  # mkdir / create a file
            parent = m.dirs()[b % len(m.dirs())]
            name = m.free_name(parent, c)
            if name is not None:
                node, kind = _uuid(), "dir" if op == 0 else "file"
                m.parent[node], m.name[node], m.kind[node], m.version[node] = (
                    parent, name, kind, 1)
                content = None if kind == "dir" else f"c{c}"
                metadata = {} if c % 3 == 0 else {"k": c % 5}
                tx.append(wire(ns, Created(
                    id=node, parent_id=parent, name=name, kind=kind,
                    path="(stale on purpose)", content=content, metadata=metadata,
                    version=1)))
        elif op == 2 and nodes:  # write a file, with metadata or without
            files = [n for n in nodes if m.kind[n] == "file"]
            if files:
                node = files[b % len(files)]
                m.version[node] += 1
                write = wire(ns, Written(
                    id=node, path="(stale on purpose)", content=f"w{c}",
                    metadata={"w": c % 7} if c % 2 else None, version=m.version[node]))
                if c % 4 == 0:  # without the key, which the folds read as null: unchanged
                    del write[3]["metadata"]
                tx.append(write)
        elif op == 3 and nodes:  # rename or move, never into its own subtree
            node = nodes[b % len(nodes)]
            inside = set(m.subtree(node))
            targets = [d for d in m.dirs() if d not in inside]
            parent = targets[c % len(targets)]
            name = m.free_name(parent, c // 7)
            if name is not None:
                old_parent, old_name = m.parent[node], m.name[node]
                assert old_parent is not None
                m.parent[node], m.name[node] = parent, name
                m.version[node] += 1
                tx.append(wire(ns, Moved(
                    id=node, kind=m.kind[node], old_parent_id=old_parent, old_name=old_name,
                    old_path="(stale on purpose)", parent_id=parent, name=name,
                    path="(stale on purpose)", version=m.version[node])))
        elif op == 4 and nodes:  # delete, recursively
            node = nodes[b % len(nodes)]
            gone = m.subtree(node)
            tx.append(wire(ns, Deleted(
                id=node, kind=m.kind[node], path="(stale on purpose)", recursive=True,
                count=len(gone), version=m.version[node])))
            for n in gone:
                for d in (m.parent, m.name, m.kind, m.version):
                    d.pop(n)
        elif op == 6 and nodes:  # replace the metadata of a file or a directory
            node = nodes[b % len(nodes)]
            m.version[node] += 1
            tx.append(wire(ns, MetadataSet(
                id=node, path="(stale on purpose)", metadata={"m": c % 3} if c % 5 else {},
                version=m.version[node])))
        elif op == 5 and c % 4 == 0:  # drop the namespace and create it again
            tx.append(wire(ns, NamespaceDropped(root_id=m.root, count=len(m.parent))))
            emit(tx)
            tx = create_ns(ns)
        emit(tx)
    return hist


def insert(engine: Engine, hist: History) -> None:
    """Append ``hist`` to ``events`` (test setup: positions chosen by the history)."""
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO events (namespace, position, node_id, type, payload) "
                 "VALUES (:ns, :pos, :node, :type, CAST(:payload AS jsonb))"),
            [{"ns": e.namespace, "pos": e.position, "node": e.node_id, "type": e.type,
              "payload": json.dumps(e.payload)} for e in hist.events],
        )
        last = max(e.position for e in hist.events)
        conn.execute(text("SELECT setval('event_position_seq', :v)"),
                     {"v": last - last % POSITION_BLOCK})
