"""Request and response bodies of the HTTP API (pydantic models, hence the OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coordinator import paths
from coordinator.eventlog import Event
from coordinator.tree import MutationResult, Node

# Lengths in characters; the coordinator enforces the byte limits and answers 422.
PathStr = Annotated[str, Field(min_length=1, max_length=paths.MAX_PATH_BYTES)]
NameStr = Annotated[str, Field(min_length=1, max_length=paths.MAX_NAME_BYTES)]
#: A node reference: a path if it starts with "/", else a node id.
RefStr = Annotated[str, Field(min_length=1, max_length=paths.MAX_PATH_BYTES)]
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
NamespaceStr = Annotated[
    str, Field(min_length=1, max_length=paths.NAMESPACE_MAX, pattern=NAMESPACE_PATTERN)
]
Version = Annotated[int, Field(ge=1, le=2**62)]


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
    position of the change (null when nothing changed, e.g. mkdir -p of an existing dir)."""

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
    name: NamespaceStr


class NamespacesOut(BaseModel):
    namespaces: list[str]


class MkdirIn(Strict):
    path: PathStr
    parents: bool = False


class CreateFileIn(Strict):
    path: PathStr
    content: str = ""
    metadata: dict[str, Any] | None = None


class WriteIn(Strict):
    content: str
    metadata: dict[str, Any] | None = None
    if_version: Version | None = None


class MoveIn(Strict):
    dst: PathStr = Field(description="the full destination path")
    if_version: Version | None = None


class RenameIn(Strict):
    name: NameStr
    if_version: Version | None = None


# ------------------------------------------------------------------ batch


class MkdirOp(Strict):
    op: Literal["mkdir"]
    path: PathStr
    parents: bool = False


class CreateFileOp(Strict):
    op: Literal["create_file"]
    path: PathStr
    content: str = ""
    metadata: dict[str, Any] | None = None


class WriteFileOp(Strict):
    op: Literal["write_file"]
    ref: RefStr
    content: str
    metadata: dict[str, Any] | None = None
    if_version: Version | None = None


class MoveOp(Strict):
    op: Literal["move"]
    ref: RefStr
    dst: PathStr
    if_version: Version | None = None


class RenameOp(Strict):
    op: Literal["rename"]
    ref: RefStr
    name: NameStr
    if_version: Version | None = None


class DeleteOp(Strict):
    op: Literal["delete"]
    ref: RefStr
    recursive: bool = False
    if_version: Version | None = None


BatchOp = Annotated[
    MkdirOp | CreateFileOp | WriteFileOp | MoveOp | RenameOp | DeleteOp,
    Field(discriminator="op"),
]


class BatchIn(Strict):
    operations: list[BatchOp] = Field(min_length=1, max_length=1000)


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
    #: Events not yet applied by the indexer (null: no indexer checkpoint yet).
    indexer_lag_events: int | None = None
    indexer_lag_seconds: float | None = None
    detail: str | None = None
