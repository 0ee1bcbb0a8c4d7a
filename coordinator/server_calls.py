"""The calls of the tree's server-side functions (``pathkeeper_*``, each a write rule
whole): for each, its arguments as the function takes them (checked here first where
the rule is Python's: names, paths, content), its statement, and what its answer or its
refusal means. ``TreeTx`` runs them inside a group; ``coordinator.single_statement``
wraps the same calls in one statement that is a whole transaction. A command that
declares its function (``commands.NodeFunctionCommand``) has no class here:
``FunctionCall`` reads its declaration."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sqlalchemy.exc import IntegrityError

from . import paths, sql
from .commands import Limits, NodeFunctionCommand, ServerFunction
from .content import check_content, metadata_json
from .db import FOREIGN_KEY_VIOLATION, driver_sql, sqlstate, translate
from .errors import AlreadyExists, CoordinatorError, NotFound
from .events import Created, DomainEvent
from .node_rows import DbRow, check_walk, node_of, parse_id
from .results import Node
from .retries import Retry


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


# The node a mutation names, locked FOR UPDATE, and its path, by the server's rule
# (migrations/versions/*_0007_delete_function.py).
LOCK_CALL = "pathkeeper_lock(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), true)"
LOCK_SQL = driver_sql(f"SELECT (l.node).*, l.path FROM {LOCK_CALL} AS l", binary=("parts",))

def function_call(fn: ServerFunction) -> str:
    """The call of ``fn`` with its arguments as named parameters (the node's four
    first, as every ``pathkeeper_*`` function takes them)."""
    args = "".join(f", CAST(:{a.name} AS {a.sql_type})" for a in fn.args)
    return f"{fn.name}(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid){args})"


def function_binary(fn: ServerFunction) -> tuple[str, ...]:
    """The parameters sent in binary: the arrays (see ``db.driver_sql``)."""
    return ("parts", *(a.name for a in fn.args if a.sql_type.endswith("[]")))


#: The names an event field takes from the node a function answered.
NODE_FIELDS = frozenset(f.name for f in dataclasses.fields(Node))


@functools.cache
def event_sources(fn: ServerFunction) -> tuple[tuple[str, str, str], ...]:
    """Where each field of ``fn``'s event comes from: (field, "node" | "arg" | "row",
    the attribute, parameter or column read), as ``ServerFunction`` says."""
    params = {a.name for a in fn.args}
    columns = dict(fn.columns)
    out = []
    for f in dataclasses.fields(fn.event):
        if f.name in columns:
            out.append((f.name, "row", columns[f.name]))
        elif f.name in NODE_FIELDS:
            out.append((f.name, "node", f.name))
        elif f.name in params:
            out.append((f.name, "arg", f.name))
        else:
            out.append((f.name, "row", f.name))
    return tuple(out)


#: The columns of the node a change answers. Never its content: a change that sets it
#: (a create, a write) answers what it wrote, its own argument; any other answers None
#: for it, so a rename, a move, a delete or a metadata change costs the same for an 8
#: MiB file as for an empty one (with the content sent back, a lone rename of one took
#: 40-44 ms against 0.9 ms; bench/README.md).
NODE_ANSWER = ("id", "parent_id", "name", "kind", "version", "metadata", "created_at",
               "updated_at")


def _with_content(node: Node, content: str | None) -> Node:
    return dataclasses.replace(node, content=content)


@functools.cache
def answer_columns(fn: ServerFunction) -> tuple[str, ...]:
    """The columns of ``fn``'s row its caller reads (``FunctionCall.result``): the
    node's (``NODE_ANSWER``) and its path, the ``changed`` flag, and the columns its
    event's other fields come from."""
    columns = [*NODE_ANSWER, "path"]
    for name in ((fn.changed,) if fn.changed else ()) + tuple(
            column for _, source, column in event_sources(fn) if source == "row"):
        if name not in columns:
            columns.append(name)
    return tuple(columns)


@functools.cache
def _function_sql(fn: ServerFunction) -> str:
    return driver_sql(f"SELECT {', '.join(answer_columns(fn))} FROM {function_call(fn)}",
                      binary=function_binary(fn))


@dataclass(frozen=True)
class FunctionCall(NodeCall):
    """A ``NodeFunctionCommand``'s call as its declaration (``function``) says: its
    arguments checked by Python's rules first, its statement, and what its answer (the
    node's row) or its refusal means; for ``TreeTx.call_function`` and for the command
    alone (``coordinator.single_statement``)."""

    function: ServerFunction
    args: dict[str, Any]  # each argument as sent, checked

    @classmethod
    def of(cls, ns: str, command: NodeFunctionCommand, limits: Limits) -> FunctionCall:
        fn = command.function
        args = {}
        for arg in fn.args:
            value = None if arg.field is None else getattr(command, arg.field)
            args[arg.name] = value if arg.check is None else arg.check(value, limits)
        return cls(*cls.target(ns, command.ref), fn, args)

    @property
    def sql(self) -> str:
        return _function_sql(self.function)

    @property
    def params(self) -> dict[str, Any]:
        return {**self.node_params, **self.args}

    def refused(self, exc: IntegrityError) -> Exception:
        """The typed error for a constraint's refusal, as the declaration says."""
        fn = self.function
        if fn.retry_on_foreign_key and sqlstate(exc) == FOREIGN_KEY_VIOLATION:
            return Retry()
        if fn.taken is not None and getattr(getattr(exc.orig, "diag", None),
                                            "constraint_name", None):
            return translate(exc, fn.taken(self.args, self.parts))
        return translate(exc)  # the function's own refusal, which names the path

    def result(self, row: DbRow) -> tuple[Node, DomainEvent | None]:
        """The node the function answered, and its event (None: nothing changed)."""
        fn = self.function
        node = node_of(self.ns, row, row.path, with_content=False)
        if "content" in self.args:  # a write: what it wrote (``NODE_ANSWER``)
            node = _with_content(node, self.args["content"])
        if fn.changed is not None and not getattr(row, fn.changed):
            return node, None
        values = {}
        for name, source, key in event_sources(fn):
            if source == "node":
                values[name] = getattr(node, key)
            elif source == "arg":
                values[name] = self.args[key]
            else:
                value = getattr(row, key)
                values[name] = str(value) if isinstance(value, uuid.UUID) else value
        return node, fn.event(**values)


# A copy, whole, in the server (coordinator/sql/fn_copy.sql).
COPY_CALL = (
    "pathkeeper_copy(:ns, :ref, CAST(:parts AS text[]), CAST(:id AS uuid), "
    "CAST(:dst AS text[]), :name, CAST(:if_version AS bigint), "
    "CAST(:max_depth AS integer), CAST(:max_nodes AS integer))"
)
_COPY_SQL = driver_sql(f"SELECT * FROM {COPY_CALL}", binary=("parts", "dst"))

#: The most nodes one copy creates. A copy is one transaction that holds the source's
#: lock and its new rows until it commits, and appends one event per node; its
#: transaction's events must fit one block (``results.POSITION_BLOCK``, 65,536) with
#: room for the rest of a group. A copy of 10,000 nodes took 0.7 s, events included
#: (``tests/test_copy.py``, printed), and six such copies still fit one group; more is
#: a job for an export and an import.
MAX_COPY_NODES = 10_000


@dataclass(frozen=True)
class CopyCall(NodeCall):
    """A copy's arguments as ``pathkeeper_copy`` takes them (the destination's path and
    the new name checked here first: their rules are Python's), and what its answer
    (one row per new node, parents first) means; for ``TreeTx.copy``."""

    dst: list[str]  # the destination directory's names
    name: str | None  # None: the source's own name
    if_version: int | None
    max_depth: int
    max_nodes: int
    sql: ClassVar[str] = _COPY_SQL

    @classmethod
    def of(cls, ns: str, ref: object, to_parent: object, name: object | None,
           if_version: int | None, max_depth: int, max_nodes: int = MAX_COPY_NODES
           ) -> CopyCall:
        # The copy's top goes one level below the destination.
        dst = paths.split_path(to_parent, max_depth - 1)
        new_name = None if name is None else paths.validate_name(name)
        return cls(*cls.target(ns, ref), dst, new_name, if_version, max_depth, max_nodes)

    @property
    def params(self) -> dict[str, Any]:
        return {**self.node_params, "dst": self.dst, "name": self.name,
                "if_version": self.if_version, "max_depth": self.max_depth,
                "max_nodes": self.max_nodes}

    def refused(self, exc: IntegrityError) -> CoordinatorError:
        """The typed error for a constraint's refusal: a name taken after the function's
        own check, or the destination deleted after its walk."""
        if not getattr(getattr(exc.orig, "diag", None), "constraint_name", None):
            return translate(exc)  # the function's own refusal, which names the path
        where = paths.join_path(self.dst)
        name = self.name if self.name is not None else (
            self.parts[-1] if self.parts else None)
        return translate(exc, {
            AlreadyExists: f"the copy's name is already taken in {where}" if name is None
            else f"{paths.join_path([*self.dst, name])} already exists",
            NotFound: f"{where} was deleted",
        })

    def events(self, rows: list[DbRow]) -> list[Created]:
        """The event of each new node, parents first."""
        return [created_event(node_of(self.ns, row, row.path), row) for row in rows]

    def top(self, row: DbRow) -> Node:
        """The copy's top node (its first row), without its content (``NODE_ANSWER``)."""
        return node_of(self.ns, row, row.path, with_content=False)


# A create, whole, in the server (migrations/versions/*_0006_create_function.py).
CREATE_CALL = (
    "pathkeeper_create(:ns, CAST(:parent AS text[]), CAST(:id AS uuid), :name, :kind, "
    ":content, CAST(:md AS jsonb))"
)
_CREATE_SQL = driver_sql(f"SELECT {', '.join(NODE_ANSWER)} FROM {CREATE_CALL}",
                         binary=("parent",))


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
    sql: ClassVar[str] = _CREATE_SQL

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
        """The new node, with the content it was created with (``NODE_ANSWER``)."""
        return _with_content(node_of(self.ns, row, self.path, with_content=False),
                             self.content)


def created_event(node: Node, row: DbRow) -> Created:
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


_STAT_BY_PATH = driver_sql(sql.load("q_stat_by_path"), binary=("parts",))
_STAT_BY_ID = driver_sql(sql.load("q_stat_by_id"))


@dataclass(frozen=True)
class StatQuery(NodeCall):
    """A stat as one statement (``sql`` with ``params``, at most one row) and what its
    answer means; for ``TreeTx.stat`` and for a stat that is a whole transaction
    (``coordinator.single_statement``)."""

    @classmethod
    def of(cls, ns: str, ref: object) -> StatQuery:
        return cls(*cls.target(ns, ref))

    @property
    def sql(self) -> str:
        return _STAT_BY_ID if self.parts is None else _STAT_BY_PATH

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
