"""Tree operations inside one PostgreSQL transaction on one namespace.

Locking, in short (README "How locks work" has the long form):

* The tree is an adjacency list, so a rename or move updates one row whatever
  the size of the subtree, and paths are computed, never stored.
* A mutation locks its target row (``FOR UPDATE``, or ``FOR NO KEY UPDATE`` for a
  content write). A target named by path is resolved, locked, then resolved
  again: if the path no longer leads to the locked row, it is resolved anew
  (a compare-and-swap, done by the database).
* Creating a child checks the foreign key to its parent, which takes
  ``FOR KEY SHARE`` on the parent: a create and a rename of the same directory
  serialize; anything in disjoint subtrees, or deeper down, does not wait.
* The only way to make a cycle is to move a directory under a new parent while
  something on that parent's ancestor chain moves under the first directory. A
  directory move that changes parent therefore also takes ``FOR KEY SHARE`` on
  every ancestor of its destination, then re-reads the chain: while those locks
  are held no ancestor can change parent, so the "not into itself" check
  stays true until commit. Opposing moves may deadlock; PostgreSQL detects it and
  the coordinator retries.
* The same locks keep the depth limit for directory moves. A move that takes a
  directory deeper counts the levels of its subtree after it holds ``FOR UPDATE``
  on the directory and the locked chain of its destination; any other directory
  move into that subtree, or of anything on that chain, needs one of those rows
  (``FOR KEY SHARE`` on its own destination chain, or ``FOR UPDATE`` on its
  directory), so it committed before the count or waits until this move commits
  and then counts with it. What the count cannot see are nodes created (or files
  moved) in the subtree by transactions still running: such a transaction can
  leave its new nodes as many levels past the limit as it creates (one for
  mkdir, create and a file move), never more than ``2 * max_depth - 1``. Nothing
  can be created below them, and no move takes them deeper.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from . import paths
from .db import FOREIGN_KEY_VIOLATION, Driver, driver_sql, sqlstate, streamed, translate
from .errors import (
    AlreadyExists,
    CoordinatorError,
    InvalidContent,
    NotADirectory,
    NotFound,
    TooLarge,
)
from .eventlog import EventAppender
from .events import Created, Deleted, MetadataSet, Moved, Written
from .results import MutationResult, Node
from .subtree import subtree_cte

#: A row read by column name (``row.id``): psycopg's named tuple on the paths that go
#: through ``Driver``, SQLAlchemy's ``Row`` elsewhere.
DbRow = Any


class Retry(Exception):
    """The transaction raced with another one in a way that a re-run resolves."""


NODE_COLUMNS = "id, parent_id, name, kind, version, content, metadata, created_at, updated_at"

# The nodes along a path, root first: ``pathkeeper_resolve`` (migration 0004) probes one
# name at a time in the statement's snapshot, so a missing name ends the walk.
RESOLVE_SQL = driver_sql(
    "SELECT unnest(r.ids) AS id, unnest(r.kinds) AS kind "
    "FROM pathkeeper_resolve(:ns, CAST(:parts AS text[])) AS r",
    binary=("parts",),
)

@dataclass(frozen=True)
class NodeCall:
    """The node a server-side call names: by path (``parts``, its names) or by id, as
    every ``pathkeeper_*`` function that takes a node reference expects it."""

    ns: str
    ref: str
    parts: list[str] | None  # the path's names, or None for a node id
    node_id: uuid.UUID | None

    @staticmethod
    def target(ns: str, ref: object) -> tuple[str, str, list[str] | None, uuid.UUID | None]:
        """The four fields above for ``ref`` (checked: a valid path or node id)."""
        if paths.is_path_ref(ref):
            return ns, str(ref), paths.lookup_path(ref), None
        return ns, str(ref), None, parse_id(ref)

    @property
    def node_params(self) -> dict[str, Any]:
        return {"ns": self.ns, "ref": self.ref, "parts": self.parts, "id": self.node_id}


# A rename, whole, in the server (migrations/versions/*_0004_rename_function.py).
RENAME_CALL = (
    "pathkeeper_rename(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), :name, "
    "CAST(:if_version AS bigint))"
)
_RENAME_SQL = driver_sql(f"SELECT * FROM {RENAME_CALL}", binary=("parts",))

# The node a mutation names, locked FOR UPDATE, and its path, by the server's rule
# (migrations/versions/*_0007_delete_function.py).
LOCK_CALL = "pathkeeper_lock(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), true)"
_LOCK_SQL = driver_sql(f"SELECT (l.node).*, l.path FROM {LOCK_CALL} AS l", binary=("parts",))

# A subtree with paths, depth first (path order), from the node with id :id at :path.
WALK_SQL = (
    subtree_cte(NODE_COLUMNS.split(", "), "namespace = :ns AND id = :id")
    + 'SELECT * FROM sub ORDER BY path COLLATE "C"'
)

# The node with id :id and its ancestors, as ``up`` (depth 0: the node). The depth
# guard makes a (constraint-violating) cycle end the query.
_UP_CTE = """
    WITH RECURSIVE up(id, parent_id, name, depth) AS (
        SELECT id, parent_id, name, 0 FROM nodes WHERE namespace = :ns AND id = :id
      UNION ALL
        SELECT n.id, n.parent_id, n.name, u.depth + 1
        FROM up u JOIN nodes n ON n.namespace = :ns AND n.id = u.parent_id
        WHERE u.depth < 100000
    )
"""


# A stat in one statement, so in one snapshot: by path, the walk (for the error that says
# where it breaks off) and the row at its end; by id, the row and its ancestors' names.
_N_COLUMNS = ", ".join(f"n.{c}" for c in NODE_COLUMNS.split(", "))
_STAT_BY_PATH_SQL = driver_sql(
    f"""
    SELECT r.ids AS chain_ids, r.kinds AS chain_kinds, {_N_COLUMNS}
    FROM pathkeeper_resolve(:ns, CAST(:parts AS text[])) AS r
    LEFT JOIN nodes n ON n.namespace = :ns AND n.id = r.ids[:n + 1]
    """,
    binary=("parts",),
)
_STAT_BY_ID_SQL = driver_sql(
    _UP_CTE + f"""
    SELECT {NODE_COLUMNS}, ARRAY(SELECT name FROM up ORDER BY depth DESC) AS names
    FROM nodes WHERE namespace = :ns AND id = :id
    """
)


def parse_id(ref: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(ref))
    except ValueError as exc:
        raise NotFound(f"no node with id {ref}") from exc


def check_content(content: object, max_bytes: int = paths.MAX_CONTENT_BYTES) -> str:
    """``content`` if a file may hold it, else ``InvalidContent`` or, past ``max_bytes``
    bytes of UTF-8, ``TooLarge``: the one content rule of every write path."""
    if not isinstance(content, str):
        raise InvalidContent("content must be a string")
    if "\x00" in content:
        raise InvalidContent("content contains NUL")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidContent("content is not valid Unicode") from exc
    if size > max_bytes:
        raise TooLarge(f"content is {size} bytes, more than the limit of {max_bytes}")
    return content


#: How deep metadata may nest: the metadata object is level 1, each object or array
#: inside it one more. Real metadata has a few levels; the bound keeps every recursive
#: reader of a stored value (Python's json, the HTTP layer's models and answers,
#: Elasticsearch's parser) far from its own limit, and refuses a hostile value with a
#: typed error before any of them meets it.
MAX_METADATA_DEPTH = 100


def metadata_too_deep(what: str = "metadata") -> InvalidContent:
    return InvalidContent(f"{what} nested deeper than {MAX_METADATA_DEPTH} levels")


def _check_metadata_values(metadata: dict[Any, Any]) -> None:
    """Refuse NUL in any key or string, and nesting past ``MAX_METADATA_DEPTH``: one
    walk with a stack of its own, since recursion would fail on the values it refuses."""
    stack: list[tuple[Any, int]] = [(metadata, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise metadata_too_deep()
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for key, item in items:
            if (isinstance(key, str) and "\x00" in key) or (
                isinstance(item, str) and "\x00" in item
            ):
                # jsonb cannot hold NUL; the text "\u0000" (a backslash and five
                # letters) is fine.
                raise InvalidContent("metadata contains NUL")
            if isinstance(item, (dict, list, tuple)):
                stack.append((item, depth + 1))


def metadata_json(metadata: object) -> str:
    if not isinstance(metadata, dict):
        raise InvalidContent("metadata must be a JSON object")
    _check_metadata_values(metadata)
    try:
        dumped = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
        dumped.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidContent(f"metadata is not valid JSON: {exc}") from exc
    return dumped


def node_of(ns: str, row: DbRow, path: str, with_content: bool = True) -> Node:
    """The ``Node`` of a ``nodes`` row (``NODE_COLUMNS``) at ``path``. A row without the
    timestamps (the indexer's walks select none) gives a node without them."""
    return Node(
        id=str(row.id),
        namespace=ns,
        parent_id=str(row.parent_id) if row.parent_id is not None else None,
        name=row.name,
        kind=row.kind,
        version=int(row.version),
        path=path,
        content=row.content if with_content else None,
        metadata=dict(row.metadata or {}),
        # Asked of the row's keys, not with getattr's default: a missing attribute costs
        # the row an exception built and caught, twice per node of a subtree walk.
        created_at=row.created_at if "created_at" in row._fields else None,
        updated_at=row.updated_at if "updated_at" in row._fields else None,
    )


@dataclass(frozen=True)
class RenameCall(NodeCall):
    """A rename's arguments as ``pathkeeper_rename`` takes them (checked here first: the
    name's rules are Python's), and what its answer means; for ``TreeTx.rename`` and for
    a rename that is a whole transaction (``coordinator.single_statement``)."""

    name: str
    if_version: int | None

    @classmethod
    def of(
        cls, ns: str, ref: object, new_name: object, if_version: int | None
    ) -> RenameCall:
        name = paths.validate_name(new_name)
        return cls(*cls.target(ns, ref), name, if_version)

    @property
    def params(self) -> dict[str, Any]:
        return {**self.node_params, "name": self.name, "if_version": self.if_version}

    def refused(self, exc: IntegrityError) -> CoordinatorError:
        """The typed error for a unique violation of this rename."""
        if not getattr(getattr(exc.orig, "diag", None), "constraint_name", None):
            return translate(exc)  # the function's own refusal, which names the path
        # A sibling of that name committed after the function's own check: the
        # constraint's message does not say which path (by path, it is known here).
        name = self.name
        where = name if self.parts is None else paths.join_path([*self.parts[:-1], name])
        return translate(exc, {AlreadyExists: f"{where} already exists"})

    def result(self, row: DbRow) -> tuple[Node, Moved | None]:
        """The renamed node, and its event (None when the name was already that)."""
        return _moved(node_of(self.ns, row, row.path), row, row.parent_id)


def _moved(node: Node, row: DbRow, old_parent_id: object) -> tuple[Node, Moved | None]:
    """The node a rename or move function answered (``row``: its columns plus
    ``old_name``, ``old_path`` and ``changed``), and its event (None: nothing changed)."""
    if not row.changed:
        return node, None
    return node, Moved(
        id=node.id,
        kind=node.kind,
        old_parent_id=str(old_parent_id),
        old_name=row.old_name,
        old_path=row.old_path,
        parent_id=str(row.parent_id),
        name=node.name,
        path=node.path,
        version=node.version,
    )


# A move, whole, in the server (migrations/versions/*_0008_move_function.py).
MOVE_CALL = (
    "pathkeeper_move(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), "
    "CAST(:dst AS text[]), :name, CAST(:if_version AS bigint), CAST(:max_depth AS integer))"
)
_MOVE_SQL = driver_sql(f"SELECT * FROM {MOVE_CALL}", binary=("parts", "dst"))


@dataclass(frozen=True)
class MoveCall(NodeCall):
    """A move's arguments as ``pathkeeper_move`` takes them (the destination path checked
    here first: its rules are Python's), and what its answer means; for ``TreeTx.move``
    and for a move that is a whole transaction (``coordinator.single_statement``)."""

    dst: list[str]  # the destination directory's names
    name: str
    if_version: int | None
    max_depth: int

    @classmethod
    def of(cls, ns: str, ref: object, dst_path: object, if_version: int | None,
           max_depth: int) -> MoveCall:
        dst, name = paths.parent_and_name(dst_path, max_depth)
        return cls(*cls.target(ns, ref), dst, name, if_version, max_depth)

    @property
    def path(self) -> str:
        return paths.join_path([*self.dst, self.name])

    @property
    def params(self) -> dict[str, Any]:
        return {**self.node_params, "dst": self.dst, "name": self.name,
                "if_version": self.if_version, "max_depth": self.max_depth}

    def refused(self, exc: IntegrityError) -> CoordinatorError:
        """The typed error for a constraint's refusal: a name taken after the function's
        own check, or the destination deleted after its walk."""
        if not getattr(getattr(exc.orig, "diag", None), "constraint_name", None):
            return translate(exc)  # the function's own refusal, which names the path
        return translate(exc, {
            AlreadyExists: f"{self.path} already exists",
            NotFound: "the destination directory was deleted",
        })

    def result(self, row: DbRow) -> tuple[Node, Moved | None]:
        """The moved node, and its event (None when it was already there)."""
        return _moved(node_of(self.ns, row, row.path), row, row.old_parent_id)


# A content write and a metadata write, whole, in the server
# (migrations/versions/*_0009_write_functions.py).
WRITE_CALL = (
    "pathkeeper_write(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), :content, "
    "CAST(:md AS jsonb), CAST(:if_version AS bigint))"
)
SET_METADATA_CALL = (
    "pathkeeper_set_metadata(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), "
    "CAST(:md AS jsonb), CAST(:if_version AS bigint))"
)
_WRITE_SQL = driver_sql(f"SELECT * FROM {WRITE_CALL}", binary=("parts",))
_SET_METADATA_SQL = driver_sql(f"SELECT * FROM {SET_METADATA_CALL}", binary=("parts",))


@dataclass(frozen=True)
class WriteCall(NodeCall):
    """A file's content write (``content`` set; ``metadata`` too if given) or a metadata
    write (``content`` None) as ``pathkeeper_write`` / ``pathkeeper_set_metadata`` take
    them (the content's and the metadata's rules checked here first: they are Python's),
    and what the answer means; for ``TreeTx`` and for a write that is a whole transaction
    (``coordinator.single_statement``)."""

    content: str | None
    metadata: str | None  # JSON; None: unchanged (a content write only)
    if_version: int | None

    @classmethod
    def of_content(cls, ns: str, ref: object, content: object,
                   metadata: dict[str, Any] | None, if_version: int | None,
                   max_content_bytes: int = paths.MAX_CONTENT_BYTES) -> WriteCall:
        body = check_content(content, max_content_bytes)
        md = metadata_json(metadata) if metadata is not None else None
        return cls(*cls.target(ns, ref), body, md, if_version)

    @classmethod
    def of_metadata(cls, ns: str, ref: object, metadata: dict[str, Any],
                    if_version: int | None) -> WriteCall:
        return cls(*cls.target(ns, ref), None, metadata_json(metadata), if_version)

    @property
    def sql(self) -> str:
        return _SET_METADATA_SQL if self.content is None else _WRITE_SQL

    @property
    def params(self) -> dict[str, Any]:
        params = {**self.node_params, "md": self.metadata, "if_version": self.if_version}
        if self.content is not None:
            params["content"] = self.content
        return params

    @staticmethod
    def refused(exc: IntegrityError) -> Exception:
        return translate(exc)

    def result(self, row: DbRow) -> tuple[Node, Written | MetadataSet]:
        """The written node, and its event."""
        node = node_of(self.ns, row, row.path)
        if self.content is None:
            return node, MetadataSet(
                id=node.id, path=node.path, metadata=node.metadata, version=node.version
            )
        return node, Written(
            id=node.id, path=node.path, content=node.content, metadata=node.metadata,
            version=node.version,
        )


# A delete, whole, in the server (migrations/versions/*_0007_delete_function.py).
DELETE_CALL = (
    "pathkeeper_delete(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), :recursive, "
    "CAST(:if_version AS bigint))"
)
_DELETE_SQL = driver_sql(f"SELECT * FROM {DELETE_CALL}", binary=("parts",))


@dataclass(frozen=True)
class DeleteCall(NodeCall):
    """A delete's arguments as ``pathkeeper_delete`` takes them, and what its answer
    means; for ``TreeTx.delete`` and for a delete that is a whole transaction
    (``coordinator.single_statement``)."""

    recursive: bool
    if_version: int | None

    @classmethod
    def of(cls, ns: str, ref: object, recursive: bool, if_version: int | None) -> DeleteCall:
        return cls(*cls.target(ns, ref), bool(recursive), if_version)

    @property
    def params(self) -> dict[str, Any]:
        return {**self.node_params, "recursive": self.recursive,
                "if_version": self.if_version}

    @staticmethod
    def refused(exc: IntegrityError) -> Exception:
        """A create deeper in the subtree committed while the delete ran (the foreign
        key's violation): run it again. Anything else: the typed error."""
        if sqlstate(exc) == FOREIGN_KEY_VIOLATION:
            return Retry()
        return translate(exc)

    def result(self, row: DbRow) -> tuple[Node, Deleted]:
        """The deleted node as it was, and its event."""
        node = node_of(self.ns, row, row.path)
        return node, Deleted(
            id=node.id,
            kind=node.kind,
            path=node.path,
            recursive=self.recursive,
            count=int(row.count),
            version=node.version,
        )


# A create, whole, in the server (migrations/versions/*_0006_create_function.py).
CREATE_CALL = (
    "pathkeeper_create(:ns, CAST(:parent AS text[]), CAST(:id AS uuid), :name, :kind, "
    ":content, CAST(:md AS jsonb))"
)
_CREATE_SQL = driver_sql(f"SELECT * FROM {CREATE_CALL}", binary=("parent",))


@dataclass(frozen=True)
class CreateCall:
    """A create's arguments as ``pathkeeper_create`` takes them (checked here first: the
    name's and the content's rules are Python's), and what its answer means; for a create
    that is a whole transaction (``coordinator.single_statement``) and for
    ``TreeTx.create_file`` and ``mkdir`` in a group."""

    ns: str
    parent: list[str]
    name: str
    kind: str
    content: str | None
    metadata: str  # JSON
    node_id: uuid.UUID = field(default_factory=uuid.uuid4)

    @classmethod
    def file(cls, ns: str, path: object, content: object, metadata: dict[str, Any] | None,
             max_depth: int, max_content_bytes: int = paths.MAX_CONTENT_BYTES) -> CreateCall:
        parent, name = paths.parent_and_name(path, max_depth)
        md = metadata_json(metadata if metadata is not None else {})
        return cls(ns, parent, name, "file", check_content(content, max_content_bytes), md)

    @classmethod
    def dir(cls, ns: str, path: object, max_depth: int) -> CreateCall:
        parent, name = paths.parent_and_name(path, max_depth)
        return cls(ns, parent, name, "dir", None, "{}")

    @property
    def path(self) -> str:
        return paths.join_path([*self.parent, self.name])

    @property
    def params(self) -> dict[str, Any]:
        return {"ns": self.ns, "parent": self.parent, "id": self.node_id, "name": self.name,
                "kind": self.kind, "content": self.content, "md": self.metadata}

    def refused(self, exc: IntegrityError) -> CoordinatorError:
        """The typed error for a constraint's refusal: the name taken (the unique
        constraint) or the parent deleted after the function's walk (the foreign key)."""
        return translate(exc, {
            AlreadyExists: f"{self.path} already exists",
            NotFound: f"{paths.join_path(self.parent)} was deleted",
        })

    def result(self, row: DbRow) -> Node:
        """The new node (its event is written by the same statement, from the same row)."""
        return node_of(self.ns, row, self.path)




def _created_event(node: Node, row: DbRow) -> Created:
    return Created(
        id=node.id,
        parent_id=str(row.parent_id),  # a created node is never a root
        name=node.name,
        kind=node.kind,
        path=node.path,
        content=node.content,
        metadata=node.metadata,
        version=node.version,
    )


@dataclass(frozen=True)
class StatCall(NodeCall):
    """A stat as one statement (``sql`` with ``params``, at most one row) and what its
    answer means; for ``TreeTx.stat`` and for a stat that is a whole transaction
    (``coordinator.single_statement``)."""


    @classmethod
    def of(cls, ns: str, ref: object) -> StatCall:
        return cls(*cls.target(ns, ref))

    @property
    def sql(self) -> str:
        return _STAT_BY_ID_SQL if self.parts is None else _STAT_BY_PATH_SQL

    @property
    def params(self) -> dict[str, Any]:
        if self.parts is None:
            return {"ns": self.ns, "id": self.node_id}
        return {"ns": self.ns, "parts": self.parts, "n": len(self.parts)}

    def result(self, row: DbRow | None) -> Node:
        """The node; NotFound or NotADirectory saying why there is none."""
        if self.parts is None:
            if row is None:
                raise NotFound(f"no node with id {self.ref}")
            return node_of(self.ns, row, paths.join_path(list(row.names[1:])))
        assert row is not None  # the walk always answers one row
        check_walk(self.ns, self.parts, list(row.chain_kinds or []))
        return node_of(self.ns, row, paths.join_path(self.parts))


def check_walk(ns: str, parts: list[str], kinds: list[str]) -> None:
    """Raise, saying where it breaks off, unless the walk from the root (``kinds``: the
    kind of each node reached, root first) reaches the end of ``parts``."""
    if not kinds:
        raise NotFound(f"no namespace {ns!r}")
    if len(kinds) <= len(parts):
        where = paths.join_path(parts[: len(kinds) - 1])
        if kinds[-1] != "dir":
            raise NotADirectory(f"{where} is a file")
        raise NotFound(f"{paths.join_path(parts[: len(kinds)])} does not exist")


class TreeTx:
    """The operations of one transaction on one namespace. Not thread-safe."""

    def __init__(
        self,
        conn: Connection,
        namespace: str,
        appender: EventAppender,
        max_depth: int = paths.MAX_DEPTH,
        max_content_bytes: int = paths.MAX_CONTENT_BYTES,
    ) -> None:
        self.conn = conn
        self.db = Driver(conn)
        self.ns = namespace
        self.events = appender
        self.max_depth = max_depth
        self.max_content_bytes = max_content_bytes

    # ----------------------------------------------------------------- reads

    def resolve(self, parts: list[str]) -> list[DbRow]:
        """The chain of (id, kind) from the root to ``parts``; raises if it breaks off."""
        chain = self.db.all(RESOLVE_SQL, {"ns": self.ns, "parts": parts})
        check_walk(self.ns, parts, [r.kind for r in chain])
        return chain

    def _node(self, row: DbRow, path: str, with_content: bool = True) -> Node:
        return node_of(self.ns, row, path, with_content)

    def stat(self, ref: object) -> Node:
        call = StatCall.of(self.ns, ref)
        return call.result(self.db.one_or_none(call.sql, call.params))

    def listdir(
        self, ref: object = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        """Children sorted by name (byte order); ``after`` and ``limit`` page through them."""
        parent = self.stat(ref)
        if not parent.is_dir:
            raise NotADirectory(f"{parent.path} is a file")
        rows = self.conn.execute(
            text(
                f"SELECT {NODE_COLUMNS} FROM nodes WHERE namespace = :ns AND parent_id = :id "
                "AND (CAST(:after AS text) IS NULL OR name COLLATE \"C\" > :after) "
                "ORDER BY name COLLATE \"C\" LIMIT :limit"
            ),
            {"ns": self.ns, "id": uuid.UUID(parent.id), "after": after, "limit": limit},
        )
        base = parent.path.rstrip("/")
        return [self._node(r, f"{base}/{r.name}", with_content=False) for r in rows]

    def walk(self, ref: object = "/", batch: int = 1000) -> Iterator[Node]:
        """Every node of the subtree with its path, depth first, streamed from one snapshot."""
        top = self.stat(ref)
        params = {"ns": self.ns, "id": uuid.UUID(top.id), "path": top.path}
        for r in streamed(self.conn, text(WALK_SQL), params, batch):
            yield self._node(r, r.path)

    # ------------------------------------------------------------- locking

    def lock(self, ref: object) -> Node:
        """Lock the node named by ``ref`` ``FOR UPDATE`` with ``pathkeeper_lock``, the
        server's rule every mutation's function takes (resolve, lock, resolve again)."""
        call = NodeCall(*NodeCall.target(self.ns, ref))
        row = self.db.one(_LOCK_SQL, call.node_params)
        return node_of(self.ns, row, row.path)

    # ------------------------------------------------------------ mutations

    def _create(self, call: CreateCall) -> MutationResult:
        """A create: the rule runs in the server (``pathkeeper_create``), as for a create
        that is a whole transaction; the event is appended here."""
        try:
            row = self.db.one(_CREATE_SQL, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        node = call.result(row)
        return MutationResult(node, self.events.append(self.ns, _created_event(node, row)))

    def mkdir(self, path: object, parents: bool = False) -> MutationResult:
        if not parents:
            return self._create(CreateCall.dir(self.ns, path, self.max_depth))
        parent_parts, name = paths.parent_and_name(path, self.max_depth)
        parts = [*parent_parts, name]
        chain = self.db.all(RESOLVE_SQL, {"ns": self.ns, "parts": parts})
        if not chain:
            raise NotFound(f"no namespace {self.ns!r}")
        if chain[-1].kind != "dir":
            where = paths.join_path(parts[: len(chain) - 1])
            if len(chain) == len(parts) + 1:
                raise AlreadyExists(f"{where} exists and is a file")
            raise NotADirectory(f"{where} is a file")
        if len(chain) == len(parts) + 1:
            return MutationResult(self.stat(paths.join_path(parts)), None)
        result: MutationResult | None = None
        for depth in range(len(chain) - 1, len(parts)):
            try:
                result = self._create(
                    CreateCall(self.ns, parts[:depth], parts[depth], "dir", None, "{}")
                )
            except AlreadyExists as exc:
                raise Retry() from exc  # a concurrent mkdir -p made it first
        assert result is not None
        return result

    def create_file(
        self, path: object, content: str = "", metadata: dict[str, Any] | None = None
    ) -> MutationResult:
        return self._create(CreateCall.file(
            self.ns, path, content, metadata, self.max_depth, self.max_content_bytes
        ))

    def write_file(
        self,
        ref: object,
        content: str,
        metadata: dict[str, Any] | None = None,
        if_version: int | None = None,
    ) -> MutationResult:
        """Replace a file's content (and its metadata, if given): the rule runs in the
        server (``pathkeeper_write``, see its migration)."""
        return self._write(WriteCall.of_content(
            self.ns, ref, content, metadata, if_version, self.max_content_bytes
        ))

    def set_metadata(
        self, ref: object, metadata: dict[str, Any], if_version: int | None = None
    ) -> MutationResult:
        """Replace the metadata of a file or directory (not the root: it is not indexed
        and has none): the rule runs in the server (``pathkeeper_set_metadata``)."""
        return self._write(WriteCall.of_metadata(self.ns, ref, metadata, if_version))

    def _write(self, call: WriteCall) -> MutationResult:
        node, event = call.result(self.db.one(call.sql, call.params))
        return MutationResult(node, self.events.append(self.ns, event))

    def move(
        self, ref: object, dst_path: object, if_version: int | None = None
    ) -> MutationResult:
        """Move (or rename, when the parent stays) the node to the full path ``dst_path``:
        the rule runs in the server, in one statement (``pathkeeper_move``, see its
        migration and this module's docstring)."""
        call = MoveCall.of(self.ns, ref, dst_path, if_version, self.max_depth)
        try:
            row = self.db.one(_MOVE_SQL, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        node, event = call.result(row)
        return MutationResult(node, None if event is None else self.events.append(self.ns, event))

    def rename(
        self, ref: object, new_name: object, if_version: int | None = None
    ) -> MutationResult:
        """Rename the node in its directory: the rule runs in the server, in one statement
        (``pathkeeper_rename``, see its migration), with ``lock``'s protocol."""
        call = RenameCall.of(self.ns, ref, new_name, if_version)
        try:
            row = self.db.one(_RENAME_SQL, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        node, event = call.result(row)
        return MutationResult(node, None if event is None else self.events.append(self.ns, event))

    def delete(
        self, ref: object, recursive: bool = False, if_version: int | None = None
    ) -> MutationResult:
        """Delete the node (with its subtree if ``recursive``): the rule runs in the
        server, in one statement (``pathkeeper_delete``, see its migration), with
        ``lock``'s protocol."""
        call = DeleteCall.of(self.ns, ref, recursive, if_version)
        try:
            row = self.db.one(_DELETE_SQL, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        node, event = call.result(row)
        return MutationResult(node, self.events.append(self.ns, event))


def check_namespace_exists(conn: Connection, ns: str) -> None:
    if conn.execute(text("SELECT 1 FROM namespaces WHERE name = :ns"), {"ns": ns}).first() is None:
        raise NotFound(f"no namespace {ns!r}")


__all__ = [
    "CoordinatorError",
    "MutationResult",
    "Node",
    "Retry",
    "TreeTx",
]
