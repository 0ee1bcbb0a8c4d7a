"""Random valid event histories, written straight into ``events``, for comparing folds.

A small model of namespaces (mkdir, create, write with and without metadata, rename,
move across directories, recursive delete, drop and re-create a namespace) emits the
events the coordinator would, with its payload shapes, in blocks of positions like its
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
from coordinator.models import POSITION_BLOCK

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


def build(steps: list[tuple[int, int, int, int]], namespaces: list[str],
          first_block: int) -> History:
    """Decode ``steps`` into a history of ``namespaces`` starting at block ``first_block``."""
    hist = History()
    block = first_block
    models: dict[str, NsModel] = {}
    now = datetime.now(UTC)

    def emit(tx: list[tuple[str, str, str, dict[str, Any]]]) -> None:
        nonlocal block
        if not tx:
            return
        block += 1 + len(hist.ends) % 3  # holes between blocks, like rolled back writers
        base = block * POSITION_BLOCK
        for i, (ns, type_, node, payload) in enumerate(tx):
            hist.events.append(Event(base + i, ns, type_, node, payload, now))
        hist.ends.append(base + len(tx) - 1)

    def create_ns(ns: str) -> list[tuple[str, str, str, dict[str, Any]]]:
        root = _uuid()
        models[ns] = NsModel(root, {root: None}, {root: ""}, {root: "dir"}, {root: 1})
        return [(ns, "namespace_created", root, {"root_id": root})]

    for ns in namespaces:
        emit(create_ns(ns))
    for op, a, b, c in steps:
        ns = namespaces[a % len(namespaces)]
        m = models[ns]
        nodes = sorted(n for n in m.parent if n != m.root)
        tx: list[tuple[str, str, str, dict[str, Any]]] = []
        if op in (0, 1):  # mkdir / create a file
            parent = m.dirs()[b % len(m.dirs())]
            name = m.free_name(parent, c)
            if name is not None:
                node, kind = _uuid(), "dir" if op == 0 else "file"
                m.parent[node], m.name[node], m.kind[node], m.version[node] = (
                    parent, name, kind, 1)
                content = None if kind == "dir" else f"c{c}"
                metadata = {} if c % 3 == 0 else {"k": c % 5}
                tx.append((ns, "created", node, {
                    "id": node, "parent_id": parent, "name": name, "kind": kind,
                    "path": "(stale on purpose)", "content": content, "metadata": metadata,
                    "version": 1}))
        elif op == 2 and nodes:  # write a file, with metadata or without
            files = [n for n in nodes if m.kind[n] == "file"]
            if files:
                node = files[b % len(files)]
                m.version[node] += 1
                payload: dict[str, Any] = {"id": node, "content": f"w{c}",
                                           "version": m.version[node]}
                if c % 2:
                    payload["metadata"] = {"w": c % 7}
                elif c % 4 == 2:
                    payload["metadata"] = None
                tx.append((ns, "written", node, payload))
        elif op == 3 and nodes:  # rename or move, never into its own subtree
            node = nodes[b % len(nodes)]
            inside = set(m.subtree(node))
            targets = [d for d in m.dirs() if d not in inside]
            parent = targets[c % len(targets)]
            name = m.free_name(parent, c // 7)
            if name is not None:
                m.parent[node], m.name[node] = parent, name
                m.version[node] += 1
                tx.append((ns, "moved", node, {
                    "id": node, "parent_id": parent, "name": name, "version": m.version[node],
                    "path": "(stale on purpose)"}))
        elif op == 4 and nodes:  # delete, recursively
            node = nodes[b % len(nodes)]
            gone = m.subtree(node)
            tx.append((ns, "deleted", node, {
                "id": node, "kind": m.kind[node], "recursive": True, "count": len(gone),
                "version": m.version[node]}))
            for n in gone:
                for d in (m.parent, m.name, m.kind, m.version):
                    d.pop(n)
        elif op == 5 and c % 4 == 0:  # drop the namespace and create it again
            tx.append((ns, "namespace_dropped", m.root, {"count": len(m.parent)}))
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
