"""Request and response bodies of the HTTP API (pydantic models, hence the OpenAPI schema)."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from coordinator import paths
from coordinator.commands import COMMANDS, Command
from coordinator.results import Event, MutationResult, Node
from pathkeeper.http.operations import COMMAND_ROUTES, CommandRoute

NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
NamespaceStr = Annotated[
    str, Field(min_length=1, max_length=paths.NAMESPACE_MAX, pattern=NAMESPACE_PATTERN)
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str
    index: int | None = Field(None, description="the failing operation of a batch")


class ErrorOut(BaseModel):
    error: ErrorDetail


class NodeOut(BaseModel):
    id: str
    namespace: str
    parent_id: str | None
    name: str
    kind: Literal["file", "dir"]
    version: int
    path: str
    content: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def of(cls, node: Node) -> NodeOut:
        return cls(
            id=node.id, namespace=node.namespace, parent_id=node.parent_id, name=node.name,
            kind="dir" if node.kind == "dir" else "file", version=node.version, path=node.path,
            content=node.content, metadata=node.metadata, created_at=node.created_at,
            updated_at=node.updated_at,
        )


class MutationOut(BaseModel):
    """The node after the change (before it, for a delete), its version, and the event
    position of the change (null when nothing changed, e.g. mkdir -p of an existing dir).
    The node's content is there only after a change that set it (a create, a write); after
    a rename, a move, a metadata change or a delete it is null (a GET reads it)."""

    node: NodeOut
    version: int
    seq: int | None

    @classmethod
    def of(cls, result: MutationResult) -> MutationOut:
        return cls(node=NodeOut.of(result.node), version=result.node.version, seq=result.seq)


class ImportOut(BaseModel):
    """A committed import: nodes created (lines plus missing parents) and the event
    positions of the first and last of them (null when nothing was created)."""

    namespace: str
    lines: int
    created: int
    implied_dirs: int
    first_seq: int | None
    last_seq: int | None
    seconds: float


class ErrorLine(BaseModel):
    line: int
    message: str


class ListOut(BaseModel):
    nodes: list[NodeOut]
    #: Pass back as ``cursor`` for the next page; null on the last page.
    cursor: str | None


class NamespaceIn(Strict):
    name: Annotated[NamespaceStr, Field(examples=["clinton"])]


class NamespacesOut(BaseModel):
    namespaces: list[str]


# ------------------------------------------------------------------ commands
#
# The request bodies of the command routes and the batch items are derived from the
# command dataclasses (``coordinator.commands``): their fields, types, defaults and
# ``annotated_types`` limits, with unknown fields refused. A body has the fields the
# URL does not carry (``operations.CommandRoute.body``); a batch item has them all
# plus the ``op`` that names its command.

#: What the OpenAPI document says of a field beyond its name and limits.
_FIELD_DOCS = {"dst": "the full destination path"}
#: A value for each command field, shown in /docs (each one the API accepts).
_FIELD_EXAMPLES: dict[str, Any] = {
    "path": "/clinton/notes.txt", "ref": "/clinton/notes.txt", "dst": "/archive/notes.txt",
    "name": "bill", "to_parent": "/archive", "content": "hello", "metadata": {"tag": "draft"},
    "if_version": 3, "parents": True, "recursive": True,
}


def command_fields(command: type[Command], names: Iterable[str]
                   ) -> dict[str, tuple[Any, Any]]:
    """Some of a command's fields: name -> (type, default), ``...`` when required."""
    hints = get_type_hints(command, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(command)}
    specs: dict[str, tuple[Any, Any]] = {}
    for name in names:
        f = fields[name]
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{command.__name__}.{name}: a default_factory is not derived")
        specs[name] = (hints[name], ... if f.default is dataclasses.MISSING else f.default)
    return specs


def _model(name: str, command: type[Command], names: Iterable[str], **extra: Any
           ) -> type[BaseModel]:
    specs: dict[str, Any] = {**extra}
    for field, (hint, default) in command_fields(command, names).items():
        specs[field] = (hint, Field(default, description=_FIELD_DOCS.get(field),
                                    examples=[_FIELD_EXAMPLES[field]]))
    return create_model(name, __base__=Strict, **specs)


def _body_model(route: CommandRoute) -> type[BaseModel] | None:
    if not route.body:
        return None
    return _model(f"{route.command.__name__}In", route.command, route.body)


#: The JSON body of each command's route (None: everything is in the URL).
BODY_OF = {route.command: _body_model(route) for route in COMMAND_ROUTES}


def _op(command: type[Command]) -> str:
    return str(command.__dataclass_fields__["op"].default)


def _item_model(route: CommandRoute) -> type[BaseModel]:
    op_type: Any = Literal.__getitem__(_op(route.command))  # Literal["mkdir"], ...
    return _model(f"{route.command.__name__}Op", route.command, route.fields,
                  op=(op_type, ...))


_ITEMS = {route.command: _item_model(route) for route in COMMAND_ROUTES}
_COMMAND_OF_OP = {_op(command): command for command in COMMANDS}
if TYPE_CHECKING:
    BatchOp = BaseModel
else:
    BatchOp = Annotated[
        functools.reduce(operator.or_, (_ITEMS[c] for c in COMMANDS)),
        Field(discriminator="op"),
    ]


class BatchIn(Strict):
    operations: list[BatchOp] = Field(min_length=1, max_length=1000, examples=[[
        {"op": "mkdir", "path": "/archive", "parents": True},
        {"op": "move", "ref": "/clinton/notes.txt", "dst": "/archive/notes.txt"},
    ]])

    def commands(self) -> list[Command]:
        """The operations as coordinator commands, in order."""
        out: list[Command] = []
        for item in self.operations:
            values = {name: getattr(item, name) for name in type(item).model_fields}
            out.append(_COMMAND_OF_OP[values.pop("op")](**values))
        return out


class BatchOut(BaseModel):
    results: list[MutationOut]


# ------------------------------------------------------------------ search


class SearchHit(BaseModel):
    node_id: str
    path: str
    name: str
    kind: Literal["file", "dir"]
    parent_id: str | None
    seq: int
    score: float | None


class IndexedOut(BaseModel):
    indexed: bool


class SearchOut(BaseModel):
    hits: list[SearchHit]
    cursor: str | None


# ------------------------------------------------------------------ events


class EventOut(BaseModel):
    position: int
    namespace: str
    type: str
    node_id: str | None
    payload: dict[str, Any]
    committed_at: datetime

    @classmethod
    def of(cls, e: Event) -> EventOut:
        return cls(
            position=e.position, namespace=e.namespace, type=e.type, node_id=e.node_id,
            payload=e.payload, committed_at=e.committed_at,
        )


class EventsOut(BaseModel):
    events: list[EventOut]
    #: Pass back as ``after`` to continue.
    cursor: str


# ------------------------------------------------------------------ health


class HealthOut(BaseModel):
    status: Literal["ok"]


class ReadyOut(BaseModel):
    status: Literal["ok", "unavailable"]
    postgres: bool
    #: Whether the search server answers (null: no search server configured).
    search: bool | None = None
    #: Events not yet applied by the indexer (null: no indexer checkpoint yet).
    indexer_lag_events: int | None = None
    indexer_lag_seconds: float | None = None
    detail: str | None = None
