"""Every event the coordinator writes, as a typed value, and its one wire form.

An event is stored (table ``events``) and served (the HTTP feed) as three parts: a
type name, the id of the node it concerns (``node_id``) and a JSON object, its
*payload*. This module is the only place that knows how one maps to the other:
``encode`` turns a typed event into those parts, ``decode`` turns them back. Writers
(``coordinator.event_appender.EventAppender``, ``coordinator.tree``, ``coordinator.api``,
the bulk SQL of ``coordinator.importer``) and readers (``Event.change``, the folds,
the indexer's plan) go through it.

The payload of an event is its dataclass's fields (under their own names; a field
marked ``NODE_ID_COLUMN`` rides in the ``node_id`` column instead) plus ``"v"``, the
payload version of its type. Payloads stored before versions existed have no ``"v"``
and read as version 1, which is what every type still is. Adding an optional key
needs no new version: ``decode`` ignores keys it does not know, so an older reader can
follow a newer log. Changing what a type's payload means, or removing a key, takes a
new version AND a migration that rewrites the stored payloads of the old version to
the new one in the ``events`` table (snapshots hold folded nodes, not payloads):
readers know only the current version (``decode`` refuses any other with
``UnknownEvent``; the set fold, ``indexer.setfold``, reads payload keys in SQL, where a
Python upcaster could not help), so the log is upgraded once, where it is stored,
instead of at every read.

The events, with ``node_id`` the node's id (the root's for the namespace events):

* ``namespace_created {root_id}``: a new tree holding only its root (a ``dir`` named
  ``""``, version 1, no parent);
* ``namespace_dropped {count}``: the whole tree goes (``count`` nodes, root included);
* ``created {id, parent_id, name, kind, path, content, metadata, version}``;
* ``written {id, path, content, metadata, version}``: content and metadata as they are
  after the write (a write without ``metadata`` leaves it as it was);
* ``metadata_set {id, path, metadata, version}``: the metadata replaced, nothing else;
* ``moved {id, kind, old_parent_id, old_name, old_path, parent_id, name, path,
  version}``: a rename or a move; one node changes, its subtree follows because paths
  are computed, never stored;
* ``deleted {id, kind, path, recursive, count, version}``: the node and its whole
  subtree (``count`` nodes) go; a non-recursive delete only ever targets a leaf.

Payload paths are as the writer resolved them; a change that raced a rename of an
ancestor may carry the old one (see ``coordinator.event_reader``): derive paths from ids.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Final, TypeAlias

from .errors import InvalidEvent, UnknownEvent

#: The payload key that holds the payload version of the event's type.
VERSION_KEY: Final = "v"
#: The version of a stored payload without ``VERSION_KEY``: written before versions.
UNVERSIONED: Final = 1
#: Field metadata: the field is the event's ``node_id`` column, not a payload key.
NODE_ID_COLUMN: Final = {"wire": "node_id"}


class _OneNode:
    """An event about one node of a tree: its ``id`` is also its ``node_id``."""

    id: str

    @property
    def node_id(self) -> str:
        return self.id


@dataclass(frozen=True, kw_only=True)
class NamespaceCreated:
    """A new namespace: a tree holding only its root."""

    TYPE: ClassVar[str] = "namespace_created"
    VERSION: ClassVar[int] = 1

    root_id: str

    @property
    def node_id(self) -> str:
        return self.root_id


@dataclass(frozen=True, kw_only=True)
class NamespaceDropped:
    """The namespace and its whole tree are gone."""

    TYPE: ClassVar[str] = "namespace_dropped"
    VERSION: ClassVar[int] = 1

    root_id: str = field(metadata=NODE_ID_COLUMN)
    #: Nodes deleted with it, root included.
    count: int

    @property
    def node_id(self) -> str:
        return self.root_id


@dataclass(frozen=True, kw_only=True)
class Created(_OneNode):
    """A new node: a directory (``content`` None) or a file."""

    TYPE: ClassVar[str] = "created"
    VERSION: ClassVar[int] = 1

    id: str
    parent_id: str
    name: str
    kind: str
    path: str
    content: str | None
    metadata: dict[str, Any]
    version: int


@dataclass(frozen=True, kw_only=True)
class Written(_OneNode):
    """A file's content (and metadata) replaced."""

    TYPE: ClassVar[str] = "written"
    VERSION: ClassVar[int] = 1

    id: str
    path: str
    content: str | None
    #: The metadata after the write; None (or absent): unchanged. The coordinator always
    #: writes it; the folds accept a write without it.
    metadata: dict[str, Any] | None = None
    version: int


@dataclass(frozen=True, kw_only=True)
class MetadataSet(_OneNode):
    """A node's metadata replaced (a file or a directory; content and place unchanged)."""

    TYPE: ClassVar[str] = "metadata_set"
    VERSION: ClassVar[int] = 1

    id: str
    path: str
    metadata: dict[str, Any]
    version: int


@dataclass(frozen=True, kw_only=True)
class Moved(_OneNode):
    """A node renamed or moved to another directory (its subtree goes with it)."""

    TYPE: ClassVar[str] = "moved"
    VERSION: ClassVar[int] = 1

    id: str
    kind: str
    old_parent_id: str
    old_name: str
    old_path: str
    parent_id: str
    name: str
    path: str
    version: int


@dataclass(frozen=True, kw_only=True)
class Deleted(_OneNode):
    """A node deleted with its whole subtree."""

    TYPE: ClassVar[str] = "deleted"
    VERSION: ClassVar[int] = 1

    id: str
    kind: str
    path: str
    recursive: bool
    #: Nodes deleted, this one included.
    count: int
    version: int


NamespaceEvent: TypeAlias = NamespaceCreated | NamespaceDropped
#: The events that change one node of an existing namespace.
NodeEvent: TypeAlias = Created | Written | MetadataSet | Moved | Deleted
DomainEvent: TypeAlias = NamespaceEvent | NodeEvent

#: Wire type name -> class, for every event the system writes.
EVENT_TYPES: Final[dict[str, type[DomainEvent]]] = {
    cls.TYPE: cls
    for cls in (
        NamespaceCreated, NamespaceDropped, Created, Written, MetadataSet, Moved, Deleted
    )
}


#: The Python types of JSON values a field may declare, and what JSON calls them.
_JSON_NAMES: Final[dict[type, str]] = {
    str: "a string", int: "an integer", bool: "a boolean", type(None): "null", dict: "an object"
}


def _json_types(hint: Any) -> tuple[type, ...]:
    """The JSON value types a field declared ``hint`` accepts (``dict[...]``: an object)."""
    if isinstance(hint, types.UnionType):
        return tuple(t for h in typing.get_args(hint) for t in _json_types(h))
    plain = typing.get_origin(hint) or hint
    if plain not in _JSON_NAMES:
        raise TypeError(f"an event field of type {hint!r} has no JSON form")
    return (plain,)


@dataclass(frozen=True)
class _Key:
    """One field of an event class as it is on the wire."""

    name: str
    accepts: tuple[type, ...]
    required: bool
    in_payload: bool

    def expected(self) -> str:
        return " or ".join(_JSON_NAMES[t] for t in self.accepts)


def _keys(cls: type[DomainEvent]) -> tuple[_Key, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        _Key(f.name, _json_types(hints[f.name]),
             f.default is MISSING and f.default_factory is MISSING,
             dict(f.metadata) != NODE_ID_COLUMN)
        for f in fields(cls)
    )


_ABSENT: Final = object()
_SCHEMA: Final = {name: _keys(cls) for name, cls in EVENT_TYPES.items()}


def payload_keys(cls: type[DomainEvent]) -> tuple[str, ...]:
    """The payload keys of ``cls``'s current version, ``VERSION_KEY`` excluded, in
    field order (what bulk writers in SQL must build)."""
    return tuple(k.name for k in _SCHEMA[cls.TYPE] if k.in_payload)


def payload_sql(cls: type[DomainEvent], columns: dict[str, str]) -> str:
    """A PostgreSQL expression that builds ``cls``'s payload (version included) from SQL
    expressions, one per payload key: for writers that build events in bulk SQL.
    Raises ``ValueError`` unless ``columns`` names exactly ``payload_keys(cls)``."""
    if set(columns) != set(payload_keys(cls)):
        raise ValueError(
            f"{cls.TYPE} payload keys are {payload_keys(cls)}, not {tuple(columns)}"
        )
    pairs = [f"'{key}', {columns[key]}" for key in payload_keys(cls)]
    pairs.append(f"'{VERSION_KEY}', {cls.VERSION}")
    return f"jsonb_build_object({', '.join(pairs)})"


def encode(event: DomainEvent) -> tuple[str, str, dict[str, Any]]:
    """The wire form of ``event``: (type name, node_id, payload)."""
    payload = {
        k.name: getattr(event, k.name) for k in _SCHEMA[event.TYPE] if k.in_payload
    }
    payload[VERSION_KEY] = event.VERSION
    return event.TYPE, event.node_id, payload


def decode(type_: str, node_id: str | None, payload: dict[str, Any]) -> DomainEvent:
    """The typed event of a stored one (``encode``'s inverse).

    Raises ``UnknownEvent`` for a type name or payload version this code does not
    know, ``InvalidEvent`` for a payload that lacks a key of its type or holds a
    value of the wrong JSON type. Keys it does not know are ignored."""
    cls = EVENT_TYPES.get(type_)
    if cls is None:
        raise UnknownEvent(f"unknown event type {type_!r}")
    if not isinstance(payload, dict):
        raise InvalidEvent(f"{type_} event: the payload is not a JSON object")
    version = payload.get(VERSION_KEY, UNVERSIONED)
    if version != cls.VERSION or isinstance(version, bool):
        raise UnknownEvent(
            f"{type_} event: payload version {version!r} is not supported "
            f"(this code reads version {cls.VERSION})"
        )
    values: dict[str, Any] = {}
    for key in _SCHEMA[type_]:
        name = key.name
        if not key.in_payload:
            value: object = node_id
        else:
            value = payload.get(name, _ABSENT)
            if value is _ABSENT:
                if key.required:
                    raise InvalidEvent(f"{type_} event: the payload has no {name!r}")
                continue
        # Exact types: JSON decodes to exactly these, and True must not pass for an int.
        if type(value) not in key.accepts:
            raise InvalidEvent(f"{type_} event: {name} is {value!r}, not {key.expected()}")
        values[name] = value
    return cls(**values)


__all__ = [
    "EVENT_TYPES",
    "NODE_ID_COLUMN",
    "UNVERSIONED",
    "VERSION_KEY",
    "Created",
    "Deleted",
    "DomainEvent",
    "MetadataSet",
    "Moved",
    "NamespaceCreated",
    "NamespaceDropped",
    "NamespaceEvent",
    "NodeEvent",
    "Written",
    "decode",
    "encode",
    "payload_keys",
    "payload_sql",
]
