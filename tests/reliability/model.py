"""A pure-Python reference model of one namespace: a dict tree with the coordinator's rules.

No database, no coordinator code except the error classes (they are only labels
here): name and path validation, resolution and every mutation are written again
from the documented rules, so that a disagreement with ``coordinator.tree`` is a
finding about one of the two. Where the coordinator's order of checks decides
which error a caller sees (e.g. ``IsADirectory`` before ``Conflict`` on a write),
the model follows the coordinator; RELIABILITY.md lists the places where we think
the coordinator's rule itself is questionable.

Node ids are the model's own (``m0``, ``m1``, ...); the state machine test maps
them to the coordinator's UUIDs by path after every step.
"""

from __future__ import annotations

import copy
import json
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidContent,
    InvalidImport,
    InvalidMove,
    InvalidName,
    InvalidPath,
    IsADirectory,
    NotADirectory,
    NotFound,
)

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
DEFAULT_MAX_DEPTH = 256


# ------------------------------------------------------------------ validation


def _text(value: object, what: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidName(f"{what} is not UTF-8") from exc
    if not isinstance(value, str):
        raise InvalidName(f"{what} is not a string")
    return value


def _has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _is_control(c: str) -> bool:
    o = ord(c)
    return o < 0x20 or 0x7F <= o <= 0x9F


def check_name(value: object) -> str:
    """The NFC form of a valid name; raises ``InvalidName`` otherwise."""
    name = _text(value, "name")
    if name == "" or _has_surrogate(name):
        raise InvalidName("empty or not Unicode")
    name = unicodedata.normalize("NFC", name)
    if name in (".", "..") or "/" in name or any(_is_control(c) for c in name):
        raise InvalidName("reserved name or forbidden character")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidName("name too long")
    return name


# Limits for paths naming a new node; an existing node is looked up within these caps.
LOOKUP_MAX_DEPTH = 1 << 15
LOOKUP_MAX_PATH_BYTES = 1 << 20


def split(
    value: object, max_depth: int = DEFAULT_MAX_DEPTH, max_bytes: int = MAX_PATH_BYTES
) -> list[str]:
    """The normalized components of an absolute path; ``[]`` for the root."""
    path = _text(value, "path")
    if not path.startswith("/"):
        raise InvalidPath("not absolute")
    if path == "/":
        return []
    if path.endswith("/"):
        raise InvalidPath("trailing slash")
    if _has_surrogate(path):
        raise InvalidName("not Unicode")
    # The coordinator measures the path before normalizing it (names after).
    if len(path.encode("utf-8")) > max_bytes:
        raise InvalidPath("path too long")
    parts = path[1:].split("/")
    if "" in parts:
        raise InvalidPath("empty component")
    if len(parts) > max_depth:
        raise InvalidPath("too deep")
    return [check_name(p) for p in parts]


def is_path(ref: object) -> bool:
    return isinstance(ref, (str, bytes)) and _text(ref, "reference").startswith("/")


def join(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def check_content(content: object) -> str:
    if not isinstance(content, str) or "\x00" in content or _has_surrogate(content):
        raise InvalidContent("bad content")
    return content


def check_metadata(metadata: object) -> dict[str, Any]:
    """The metadata as PostgreSQL's jsonb gives it back (JSON round trip)."""
    if not isinstance(metadata, dict):
        raise InvalidContent("metadata is not an object")
    try:
        dumped = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidContent("metadata is not JSON") from exc
    loaded: dict[str, Any] = json.loads(dumped)
    if any("\x00" in s or _has_surrogate(s) for s in _strings(loaded)):
        raise InvalidContent("metadata has NUL or surrogates")
    return loaded


def _strings(value: object) -> list[str]:
    """Every key and string value in a JSON document."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


# ------------------------------------------------------------------------ tree


@dataclass
class MNode:
    id: str
    parent: str | None
    name: str
    kind: str
    version: int = 1
    content: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    children: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """What a call returns about a node: comparable with ``coordinator.Node``."""

    id: str
    path: str
    name: str
    kind: str
    version: int
    content: str | None
    metadata: dict[str, Any]


@dataclass(frozen=True)
class MResult:
    """A mutation's outcome: the node (as it was, for a delete) and how many events
    the change appends (0 for a no-op, whose ``seq`` is None)."""

    node: View
    events: int


class Namespace:
    """One namespace tree. Every method either changes nothing and raises the
    coordinator's error class, or applies the whole change."""

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.max_depth = max_depth
        self._next = 1
        self.root = MNode("m0", None, "", "dir")
        self.nodes: dict[str, MNode] = {"m0": self.root}
        self.deleted: set[str] = set()

    # ------------------------------------------------------------- reading

    def path_of(self, node_id: str) -> str:
        parts: list[str] = []
        node = self.nodes[node_id]
        while node.parent is not None:
            parts.append(node.name)
            node = self.nodes[node.parent]
        return join(parts[::-1])

    def view(self, node: MNode) -> View:
        return View(
            node.id, self.path_of(node.id), node.name, node.kind, node.version,
            node.content, dict(node.metadata),
        )

    def _resolve(self, parts: list[str]) -> MNode:
        node = self.root
        for i, name in enumerate(parts):
            if node.kind != "dir":
                raise NotADirectory(f"{join(parts[:i])} is a file")
            child = node.children.get(name)
            if child is None:
                raise NotFound(f"{join(parts[: i + 1])} does not exist")
            node = self.nodes[child]
        return node

    def _target(self, ref: object) -> MNode:
        if is_path(ref):
            return self._resolve(split(ref, LOOKUP_MAX_DEPTH, LOOKUP_MAX_PATH_BYTES))
        node = self.nodes.get(ref) if isinstance(ref, str) else None
        if node is None:
            raise NotFound(f"no node {ref!r}")
        return node

    def _parent_dir(self, parts: list[str]) -> MNode:
        node = self._resolve(parts)
        if node.kind != "dir":
            raise NotADirectory(f"{join(parts)} is a file")
        return node

    def _parent_and_name(self, path: object) -> tuple[list[str], str]:
        parts = split(path, self.max_depth)
        if not parts:
            raise InvalidPath("the root has no parent")
        return parts[:-1], parts[-1]

    def stat(self, ref: object) -> View:
        return self.view(self._target(ref))

    def listdir(self, ref: object = "/") -> list[View]:
        node = self._target(ref)
        if node.kind != "dir":
            raise NotADirectory("is a file")
        names = sorted(node.children, key=lambda n: n.encode("utf-8"))
        return [self.view(self.nodes[node.children[n]]) for n in names]

    def walk(self) -> list[View]:
        """Every node, root included, sorted by path bytes."""
        views = [self.view(n) for n in self.nodes.values()]
        return sorted(views, key=lambda v: v.path.encode("utf-8"))

    def ancestors_or_self(self, node_id: str) -> set[str]:
        out: set[str] = set()
        cur: str | None = node_id
        while cur is not None:
            out.add(cur)
            cur = self.nodes[cur].parent
        return out

    # ----------------------------------------------------------- mutations

    def _add(self, parent: MNode, name: str, kind: str, content: str | None,
             metadata: dict[str, Any]) -> MNode:
        node = MNode(f"m{self._next}", parent.id, name, kind, 1, content, metadata)
        self._next += 1
        self.nodes[node.id] = node
        parent.children[name] = node.id
        return node

    def mkdir(self, path: object, parents: bool = False) -> MResult:
        parent_parts, name = self._parent_and_name(path)
        if not parents:
            parent = self._parent_dir(parent_parts)
            if name in parent.children:
                raise AlreadyExists(name)
            return MResult(self.view(self._add(parent, name, "dir", None, {})), 1)
        parts = [*parent_parts, name]
        node, depth = self.root, 0
        while depth < len(parts) and node.kind == "dir" and parts[depth] in node.children:
            node = self.nodes[node.children[parts[depth]]]
            depth += 1
        if node.kind != "dir":
            if depth == len(parts):
                raise AlreadyExists(f"{join(parts)} is a file")
            raise NotADirectory(f"{join(parts[:depth])} is a file")
        if depth == len(parts):
            return MResult(self.view(node), 0)
        for name_ in parts[depth:]:
            node = self._add(node, name_, "dir", None, {})
        return MResult(self.view(node), len(parts) - depth)

    def create_file(self, path: object, content: object = "",
                    metadata: object = None) -> MResult:
        parent_parts, name = self._parent_and_name(path)
        body = check_content(content)
        md = check_metadata(metadata if metadata is not None else {})
        parent = self._parent_dir(parent_parts)
        if name in parent.children:
            raise AlreadyExists(name)
        return MResult(self.view(self._add(parent, name, "file", body, md)), 1)

    @staticmethod
    def _check_version(node: MNode, if_version: int | None) -> None:
        if if_version is not None and node.version != if_version:
            raise Conflict(f"version is {node.version}, expected {if_version}")

    def write_file(self, ref: object, content: object, metadata: object = None,
                   if_version: int | None = None) -> MResult:
        body = check_content(content)
        md = check_metadata(metadata) if metadata is not None else None
        node = self._target(ref)
        if node.kind == "dir":
            raise IsADirectory("is a directory")
        self._check_version(node, if_version)
        node.content = body
        if md is not None:
            node.metadata = md
        node.version += 1
        return MResult(self.view(node), 1)

    def set_metadata(self, ref: object, metadata: object,
                     if_version: int | None = None) -> MResult:
        md = check_metadata(metadata)
        node = self._target(ref)
        if node.parent is None:
            raise InvalidArgument("the root has no metadata")
        self._check_version(node, if_version)
        node.metadata = md
        node.version += 1
        return MResult(self.view(node), 1)

    def move(self, ref: object, dst: object, if_version: int | None = None) -> MResult:
        parent_parts, name = self._parent_and_name(dst)
        node = self._target(ref)
        if node.parent is None:
            raise InvalidMove("cannot move the root")
        self._check_version(node, if_version)
        return self._relink(node, self._parent_dir(parent_parts), name)

    def rename(self, ref: object, new_name: object, if_version: int | None = None) -> MResult:
        name = check_name(new_name)
        node = self._target(ref)
        if node.parent is None:
            raise InvalidMove("cannot rename the root")
        self._check_version(node, if_version)
        return self._relink(node, self.nodes[node.parent], name)

    def _relink(self, node: MNode, parent: MNode, name: str) -> MResult:
        if parent.id == node.parent and name == node.name:
            return MResult(self.view(node), 0)
        if node.id in self.ancestors_or_self(parent.id):
            raise InvalidMove("into itself or its own subtree")
        if name in parent.children:
            raise AlreadyExists(name)
        assert node.parent is not None
        del self.nodes[node.parent].children[node.name]
        node.parent, node.name = parent.id, name
        parent.children[name] = node.id
        node.version += 1
        return MResult(self.view(node), 1)

    def delete(self, ref: object, recursive: bool = False,
               if_version: int | None = None) -> MResult:
        node = self._target(ref)
        if node.parent is None:
            raise InvalidMove("cannot delete the root")
        self._check_version(node, if_version)
        if node.children and not recursive:
            raise DirectoryNotEmpty("not empty")
        before = self.view(node)
        del self.nodes[node.parent].children[node.name]
        stack = [node.id]
        while stack:
            gone = self.nodes.pop(stack.pop())
            self.deleted.add(gone.id)
            stack.extend(gone.children.values())
        return MResult(before, 1)

    def copy(self, ref: object, to_parent: object, name: object = None,
             if_version: int | None = None) -> MResult:
        """The node (a directory with its subtree) copied into ``to_parent`` as ``name``
        (its own name if None), new ids, one event per new node; the result is the
        copy's top."""
        dst = split(to_parent, self.max_depth - 1)
        new_name = None if name is None else check_name(name)
        node = self._target(ref)
        if node.parent is None:
            raise InvalidMove("cannot copy the root")
        self._check_version(node, if_version)
        parent = self._parent_dir(dst)
        if node.kind == "dir" and node.id in self.ancestors_or_self(parent.id):
            raise InvalidMove("into itself or its own subtree")
        top_name = node.name if new_name is None else new_name
        if top_name in parent.children:
            raise AlreadyExists(top_name)

        def height(n: MNode) -> int:
            return max((1 + height(self.nodes[c]) for c in n.children.values()), default=0)

        if height(node) > self.max_depth - len(dst) - 1:
            raise InvalidMove("deeper than the limit")
        made = 0

        def put(source: MNode, under: MNode, as_name: str) -> MNode:
            nonlocal made
            new = self._add(under, as_name, source.kind, source.content,
                            copy.deepcopy(source.metadata))
            made += 1
            for child in list(source.children.values()):
                put(self.nodes[child], new, self.nodes[child].name)
            return new

        top = put(node, parent, top_name)
        return MResult(self.view(top), made)

    # -------------------------------------------------------------- groups

    def group(self, steps: Sequence[Callable[[Namespace], MResult]]) -> list[MResult]:
        """Several steps as one transaction: all of them, or (the first failing step's
        error, with its position in ``index``) none."""
        trial = copy.deepcopy(self)
        results = []
        for index, step in enumerate(steps):
            try:
                results.append(step(trial))
            except CoordinatorError as exc:
                exc.index = index
                raise
        self.__dict__.update(trial.__dict__)
        return results

    # -------------------------------------------------------------- import

    def import_lines(self, lines: Sequence[dict[str, Any]]) -> int:
        """An import (README "Import"): every line is a new node, missing parents are
        made, all or nothing; the number of nodes made. The error is the first bad
        line's, checked in the importer's order: each line alone, then paths twice in
        the input, then a line below a file of the input, then against the namespace
        (a parent that is a file, a path that exists)."""
        parsed: list[tuple[list[str], str, str | None, dict[str, Any]]] = []
        first: CoordinatorError | None = None
        for line in lines:
            try:
                parts = split(line["path"], self.max_depth)
                if not parts:
                    raise InvalidImport("the root cannot be imported")
                kind = line["kind"]
                content = check_content(line.get("content") or "") if kind == "file" else None
                metadata = check_metadata(line.get("metadata") or {})
            except CoordinatorError as exc:
                first = first or exc
                continue
            parsed.append((parts, kind, content, metadata))
        if first is not None:
            raise first
        kinds: dict[tuple[str, ...], str] = {}
        for parts, kind, _, _ in parsed:
            if tuple(parts) in kinds:
                raise InvalidImport(f"{join(parts)} appears twice")
            kinds[tuple(parts)] = kind
        for parts, _, _, _ in parsed:
            if any(kinds.get(tuple(parts[:d])) == "file" for d in range(1, len(parts))):
                raise NotADirectory("below a file of the import")
        for parts, _, _, _ in parsed:
            node = self.root
            for name in parts:
                if node.kind != "dir":
                    raise NotADirectory("below a file of the namespace")
                child = node.children.get(name)
                if child is None:
                    break
                node = self.nodes[child]
            else:
                raise AlreadyExists(f"{join(parts)} already exists")
        new: dict[tuple[str, ...], tuple[str, str | None, dict[str, Any]]] = {}
        for parts, kind, content, metadata in parsed:
            new[tuple(parts)] = (kind, content, metadata)
            for d in range(1, len(parts)):
                new.setdefault(tuple(parts[:d]), ("dir", None, {}))
        made = 0
        for parts_t in sorted(new, key=len):
            parent = self._resolve(list(parts_t[:-1]))
            if parts_t[-1] in parent.children:
                continue  # an existing directory on the way
            kind, content, metadata = new[parts_t]
            self._add(parent, parts_t[-1], kind, content, metadata)
            made += 1
        return made
