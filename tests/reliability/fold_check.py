"""Fold the event log into trees, checking every event against the state it lands on.

A pure function of the events (no database): ``Fold.apply`` raises ``FoldError``
when an event does not fit the tree built so far (a path in a payload that is not
the node's path at that point, a version that does not follow, a delete whose
count is not the size of the subtree, a name taken twice in one directory...).
If the fold of the whole log equals the ``nodes`` table, the log explains the
table exactly.

Payload paths: the fold works from ids (``parent_id``, ``name``) alone, as the
event log's contract asks of consumers (coordinator/event_reader.py: a change that
resolved an ancestor's old name while a rename of that ancestor was in flight
may carry the old path at a later position than the rename). With
``strict_paths`` (sequential histories) a payload path that is not the node's
path in log order is an error; otherwise it is counted in ``stale_paths``.

This is the test's own fold, written from the events' wire form (not from
``coordinator.events``), so it and the production fold (``indexer.setfold``, the same
log folded set at a time in PostgreSQL) check each other rather than share a mistake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class EventLike(Protocol):
    @property
    def position(self) -> int: ...
    @property
    def namespace(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def node_id(self) -> str | None: ...
    @property
    def payload(self) -> dict[str, Any]: ...


#: Every payload's version, as stored (version 1 of every event is all there is).
PAYLOAD_VERSION_KEY = "v"


class FoldError(AssertionError):
    """An event does not fit the tree folded from the events before it."""


@dataclass
class FNode:
    id: str
    parent_id: str | None
    name: str
    kind: str
    version: int
    content: str | None
    metadata: dict[str, Any]

    def row(self) -> tuple[str | None, str, str, int, str | None, dict[str, Any]]:
        """The columns compared with the ``nodes`` table."""
        return (self.parent_id, self.name, self.kind, self.version, self.content, self.metadata)


@dataclass
class FTree:
    root_id: str
    nodes: dict[str, FNode] = field(default_factory=dict)
    children: dict[str, dict[str, str]] = field(default_factory=dict)

    def path_of(self, node_id: str) -> str:
        parts: list[str] = []
        node = self.nodes[node_id]
        while node.parent_id is not None:
            parts.append(node.name)
            node = self.nodes[node.parent_id]
        return "/" + "/".join(reversed(parts))

    def rows(self) -> dict[str, tuple[str | None, str, str, int, str | None, dict[str, Any]]]:
        return {i: n.row() for i, n in self.nodes.items()}

    def rows_with_paths(
        self,
    ) -> dict[str, tuple[str | None, str, str, int, str | None, dict[str, Any], str]]:
        """``rows`` and each node's path."""
        return {i: (*n.row(), self.path_of(i)) for i, n in self.nodes.items()}


class Fold:
    """Trees per namespace, built by applying events in position order."""

    def __init__(self, strict_paths: bool = True) -> None:
        self.strict_paths = strict_paths
        self.stale_paths: list[str] = []
        self.trees: dict[str, FTree] = {}
        self.last_position = 0
        self.applied = 0

    def apply_all(self, events: list[Any]) -> None:
        for e in events:
            self.apply(e)

    def apply(self, e: EventLike) -> None:
        if e.position <= self.last_position:
            raise FoldError(f"position {e.position} not after {self.last_position}")
        self.last_position = e.position
        handler = getattr(self, "_" + e.type, None)
        if handler is None:
            raise FoldError(f"unknown event type {e.type!r} at {e.position}")
        if e.payload.get(PAYLOAD_VERSION_KEY, 1) != 1:
            raise FoldError(f"unknown payload version of {e.type!r} at {e.position}")
        try:
            handler(e, e.payload)
        except (KeyError, TypeError) as exc:
            raise FoldError(f"event {e.position} ({e.type}) does not fit: {exc!r}") from exc
        self.applied += 1

    def _tree(self, e: EventLike) -> FTree:
        tree = self.trees.get(e.namespace)
        if tree is None:
            raise FoldError(f"event {e.position} in unknown namespace {e.namespace!r}")
        return tree

    @staticmethod
    def _expect(cond: bool, e: EventLike, what: str) -> None:
        if not cond:
            raise FoldError(f"event {e.position} ({e.type} {e.node_id}): {what}; {e.payload}")

    def _path(self, tree: FTree, node_id: str, payload_path: str, e: EventLike) -> None:
        actual = tree.path_of(node_id)
        if actual != payload_path:
            what = f"event {e.position} ({e.type}): payload path {payload_path!r}, " \
                f"in log order {actual!r}"
            if self.strict_paths:
                raise FoldError(what)
            self.stale_paths.append(what)

    def _namespace_created(self, e: EventLike, p: dict[str, Any]) -> None:
        self._expect(e.namespace not in self.trees, e, "namespace exists")
        root = FNode(p["root_id"], None, "", "dir", 1, None, {})
        self.trees[e.namespace] = FTree(root.id, {root.id: root}, {root.id: {}})

    def _namespace_dropped(self, e: EventLike, p: dict[str, Any]) -> None:
        tree = self._tree(e)
        self._expect(p["count"] == len(tree.nodes), e, f"count is not {len(tree.nodes)}")
        del self.trees[e.namespace]

    def _created(self, e: EventLike, p: dict[str, Any]) -> None:
        tree = self._tree(e)
        nid, parent = p["id"], p["parent_id"]
        self._expect(nid == e.node_id and nid not in tree.nodes, e, "id reused")
        self._expect(parent in tree.nodes and tree.nodes[parent].kind == "dir", e, "bad parent")
        self._expect(p["name"] not in tree.children[parent], e, "name taken")
        self._expect(p["version"] == 1 and p["kind"] in ("dir", "file"), e, "bad version/kind")
        self._expect((p["content"] is None) == (p["kind"] == "dir"), e, "content vs kind")
        node = FNode(nid, parent, p["name"], p["kind"], 1, p["content"], p["metadata"])
        tree.nodes[nid] = node
        tree.children[parent][node.name] = nid
        tree.children[nid] = {}
        self._path(tree, nid, p["path"], e)

    def _written(self, e: EventLike, p: dict[str, Any]) -> None:
        tree = self._tree(e)
        node = tree.nodes[p["id"]]
        self._expect(node.kind == "file" and p["id"] == e.node_id, e, "not a file")
        self._expect(p["version"] == node.version + 1, e, f"version after {node.version}")
        self._path(tree, node.id, p["path"], e)
        node.content, node.version = p["content"], p["version"]
        if p.get("metadata") is not None:  # absent or None: unchanged
            node.metadata = p["metadata"]

    def _metadata_set(self, e: EventLike, p: dict[str, Any]) -> None:
        tree = self._tree(e)
        node = tree.nodes[p["id"]]
        self._expect(p["id"] == e.node_id, e, "id")
        self._expect(p["version"] == node.version + 1, e, f"version after {node.version}")
        self._path(tree, node.id, p["path"], e)
        node.metadata, node.version = p["metadata"], p["version"]

    def _moved(self, e: EventLike, p: dict[str, Any]) -> None:
        tree = self._tree(e)
        node = tree.nodes[p["id"]]
        self._expect(p["id"] == e.node_id and p["kind"] == node.kind, e, "id/kind")
        self._expect(
            (node.parent_id, node.name) == (p["old_parent_id"], p["old_name"]), e, "old place"
        )
        self._path(tree, node.id, p["old_path"], e)
        self._expect(p["version"] == node.version + 1, e, f"version after {node.version}")
        new_parent = p["parent_id"]
        self._expect(tree.nodes[new_parent].kind == "dir", e, "parent is a file")
        up: str | None = new_parent
        while up is not None:
            self._expect(up != node.id, e, "moved into its own subtree")
            up = tree.nodes[up].parent_id
        self._expect(p["name"] not in tree.children[new_parent], e, "name taken")
        assert node.parent_id is not None
        del tree.children[node.parent_id][node.name]
        node.parent_id, node.name, node.version = new_parent, p["name"], p["version"]
        tree.children[new_parent][node.name] = node.id
        self._path(tree, node.id, p["path"], e)

    def _deleted(self, e: EventLike, p: dict[str, Any]) -> None:
        tree = self._tree(e)
        node = tree.nodes[p["id"]]
        self._expect(node.parent_id is not None and p["id"] == e.node_id, e, "root or id")
        self._expect(p["kind"] == node.kind and p["version"] == node.version, e, "kind/version")
        self._path(tree, node.id, p["path"], e)
        self._expect(p["recursive"] or not tree.children[node.id], e, "non-recursive, not empty")
        assert node.parent_id is not None
        del tree.children[node.parent_id][node.name]
        stack, count = [node.id], 0
        while stack:
            gone = stack.pop()
            stack.extend(tree.children.pop(gone).values())
            del tree.nodes[gone]
            count += 1
        self._expect(p["count"] == count, e, f"count is not {count}")
