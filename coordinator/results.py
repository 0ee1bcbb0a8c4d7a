"""What the API answers with: nodes, the result of a change, events of the log, search
hits.

Plain values with no database import, so the HTTP client (``pathkeeper.client``) uses the
same types as the ``Coordinator`` without installing or importing SQLAlchemy or psycopg.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Literal, Protocol

from .events import DomainEvent, decode, encode

#: Positions a transaction's block holds: ``event_position_seq`` moves by this much
#: (coordinator/event_appender.py has the protocol).
POSITION_BLOCK = 65536

#: Where a reader without a cursor of its own may start (``read_events(after=...)``):
#: ``"now"``, the end of the log (only what commits from now on), or ``"horizon"``, the
#: oldest position compaction kept (every event still in the log).
Start = Literal["now", "horizon"]
STARTS: tuple[Start, ...] = ("now", "horizon")


class EventPosition(Protocol):
    """Where a change's event is in the log: None until its transaction took its block."""

    @property
    def position(self) -> int | None: ...


@dataclass(frozen=True)
class Committed:
    """The position of an event already committed (e.g. read from an HTTP answer)."""

    position: int


@dataclass(frozen=True)
class Node:
    id: str
    namespace: str
    parent_id: str | None
    name: str
    kind: str
    version: int
    path: str
    content: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"


@dataclass(frozen=True)
class MutationResult:
    """The node after the change (as it was, for a delete) and the event position of the
    change; ``seq`` is None when the call changed nothing (e.g. ``mkdir -p`` of an
    existing directory). The node's ``content`` is there only after a change that set it
    (a create, a write): a rename, a move, a metadata change or a delete answers None for
    it, so that change costs the same for a file of 8 MiB as for an empty one (``get``
    reads it)."""

    node: Node
    event: EventPosition | None

    @property
    def seq(self) -> int | None:
        """Known once the transaction took its block: after commit (inside a group, None)."""
        return None if self.event is None else self.event.position

    @property
    def version(self) -> int:
        """The node's version after the change (as the HTTP answer's ``version``): what
        the next compare-and-swap passes as ``if_version``."""
        return self.node.version


@dataclass(frozen=True)
class Event:
    """One event of the log: where it is (position, namespace, commit time) and what it
    says, as stored and served (``type``, ``node_id``, ``payload``: the wire form of
    ``coordinator.events``) and typed (``change``)."""

    position: int
    namespace: str
    type: str
    node_id: str | None
    payload: dict[str, Any]
    committed_at: datetime

    @classmethod
    def of(
        cls, position: int, namespace: str, change: DomainEvent, committed_at: datetime
    ) -> Event:
        """The event that holds ``change`` at ``position``."""
        type_, node_id, payload = encode(change)
        return cls(position, namespace, type_, node_id, payload, committed_at)

    @cached_property
    def change(self) -> DomainEvent:
        """The typed event, decoded on first use. Raises ``InvalidEvent`` (``UnknownEvent``
        for a type or payload version this code does not know) if the stored form cannot
        be read; the envelope's fields stay readable either way."""
        return decode(self.type, self.node_id, self.payload)

    @property
    def transaction_block(self) -> int:
        """Events of one transaction share this value."""
        return self.position // POSITION_BLOCK


@dataclass(frozen=True)
class SearchHit:
    """One document of the index that matched: the node as indexed (``seq``: the position
    of the event that wrote it) and its relevance (None when sorted otherwise)."""

    node_id: str
    path: str
    name: str
    kind: Literal["file", "dir"]
    parent_id: str | None
    seq: int
    score: float | None


@dataclass(frozen=True)
class SearchPage:
    """One page of search results; ``cursor`` asks for the next (None: the last page)."""

    hits: list[SearchHit]
    cursor: str | None


def block_end(position: int) -> int:
    """The last position of the block that holds ``position``."""
    return (position // POSITION_BLOCK) * POSITION_BLOCK + POSITION_BLOCK - 1
