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

import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from . import paths, sql
from .commands import Command, GroupCommands, NodeFunctionCommand
from .db import Driver, driver_sql, streamed
from .errors import AlreadyExists, NotADirectory, NotFound
from .event_appender import EventAppender
from .node_rows import NODE_COLUMNS, DbRow, check_walk, node_of
from .results import MutationResult, Node
from .retries import Retry
from .server_calls import (
    LOCK_SQL,
    CopyCall,
    CreateCall,
    FunctionCall,
    NodeCall,
    StatQuery,
    created_event,
)
from .subtree import FROM_NODE, subtree_cte

# The nodes along a path, root first: ``pathkeeper_resolve`` (migration 0004) probes one
# name at a time in the statement's snapshot, so a missing name ends the walk.
RESOLVE_SQL = driver_sql(
    "SELECT unnest(r.ids) AS id, unnest(r.kinds) AS kind "
    "FROM pathkeeper_resolve(:ns, CAST(:parts AS text[])) AS r",
    binary=("parts",),
)

# The subtree below the node with id :id (at :path), each node with its path, depth
# first (path order): ``TreeTx.walk``.
SUBTREE_WALK_SQL = (
    subtree_cte(NODE_COLUMNS.split(", "), FROM_NODE)
    + 'SELECT * FROM sub ORDER BY path COLLATE "C"'
)
_LIST_CHILDREN = text(sql.load("q_list_children"))


class TreeTx(GroupCommands[MutationResult]):
    """The operations of one transaction on one namespace, a ``commands.Runner``; the
    typed method of every command (``GroupCommands``). Not thread-safe."""

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
        call = StatQuery.of(self.ns, ref)
        return call.result(self.db.one_or_none(call.sql, call.params))

    def listdir(
        self, ref: object = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        """Children sorted by name (byte order); ``after`` and ``limit`` page through them."""
        parent = self.stat(ref)
        if not parent.is_dir:
            raise NotADirectory(f"{parent.path} is a file")
        rows = self.conn.execute(
            _LIST_CHILDREN,
            {"ns": self.ns, "id": uuid.UUID(parent.id), "after": after, "limit": limit},
        )
        base = parent.path.rstrip("/")
        return [self._node(r, f"{base}/{r.name}", with_content=False) for r in rows]

    def walk(self, ref: object = "/", batch: int = 1000) -> Iterator[Node]:
        """Every node of the subtree with its path, depth first, streamed from one snapshot."""
        top = self.stat(ref)
        params = {"ns": self.ns, "id": uuid.UUID(top.id), "path": top.path}
        for r in streamed(self.conn, text(SUBTREE_WALK_SQL), params, batch):
            yield self._node(r, r.path)

    # ------------------------------------------------------------- locking

    def lock(self, ref: object) -> Node:
        """Lock the node named by ``ref`` ``FOR UPDATE`` with ``pathkeeper_lock``, the
        server's rule every mutation's function takes (resolve, lock, resolve again)."""
        call = NodeCall(*NodeCall.target(self.ns, ref))
        row = self.db.one(LOCK_SQL, call.node_params)
        return node_of(self.ns, row, row.path)

    # ------------------------------------------------------------ mutations

    def execute(self, command: Command) -> MutationResult:
        return command.apply(self)

    def call_function(self, command: NodeFunctionCommand) -> MutationResult:
        """A command whose whole rule is one server-side function (its declaration,
        ``command.function``); its event is appended here."""
        call = FunctionCall.of(self.ns, command, self)
        try:
            row = self.db.one(call.sql, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        node, event = call.result(row)
        return MutationResult(node, None if event is None else self.events.append(self.ns, event))

    def _create(self, call: CreateCall) -> MutationResult:
        """A create: the rule runs in the server (``pathkeeper_create``), as for a create
        that is a whole transaction; the event is appended here."""
        try:
            row = self.db.one(call.sql, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        node = call.result(row)
        return MutationResult(node, self.events.append(self.ns, created_event(node, row)))

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

    def copy(
        self, ref: object, to_parent: object, name: object | None = None,
        if_version: int | None = None,
    ) -> MutationResult:
        """Copy the node (a directory with its subtree) into ``to_parent``: the rule runs
        in the server, in one statement (``pathkeeper_copy``); one ``created`` event per
        new node, parents first, appended here. The result is the copy's top node with
        the position of the copy's last event (as ``mkdir -p`` and an import answer the
        last: ``wait_indexed(seq)`` then waits for every copy)."""
        call = CopyCall.of(self.ns, ref, to_parent, name, if_version, self.max_depth)
        try:
            rows = self.db.all(call.sql, call.params)
        except IntegrityError as exc:
            raise call.refused(exc) from exc
        positions = [self.events.append(self.ns, event) for event in call.events(rows)]
        return MutationResult(call.top(rows[0]), positions[-1])


def check_namespace_exists(conn: Connection, ns: str) -> None:
    if conn.execute(text("SELECT 1 FROM namespaces WHERE name = :ns"), {"ns": ns}).first() is None:
        raise NotFound(f"no namespace {ns!r}")
