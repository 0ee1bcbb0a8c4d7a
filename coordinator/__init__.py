"""Pathkeeper's coordinator: transactional namespace trees in PostgreSQL with an event log.

The commands, errors and result types import no database library; ``Coordinator`` and
the other names that need SQLAlchemy and psycopg are imported on first use, so the HTTP
client (``pathkeeper.client``) can use this package without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .commands import (
    Command,
    Copy,
    CreateFile,
    Delete,
    MergeMetadata,
    Mkdir,
    Move,
    Rename,
    SetMetadata,
    WriteFile,
)
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    CursorAhead,
    CursorExpired,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidConfiguration,
    InvalidContent,
    InvalidEvent,
    InvalidImport,
    InvalidMove,
    InvalidName,
    InvalidPath,
    IsADirectory,
    NotADirectory,
    NotFound,
    NotMigrated,
    OutcomeUnknown,
    TooLarge,
    Unavailable,
    UnknownEvent,
)
from .results import Event, MutationResult, Node, SearchHit, SearchPage
from .settings import Settings

if TYPE_CHECKING:
    from .api import Coordinator, GroupTx
    from .event_reader import Partition
    from .importer import ImportProgress, ImportResult

#: The names imported on first use, and the module that defines each.
_LAZY = {
    "Coordinator": "api",
    "GroupTx": "api",
    "Partition": "event_reader",
    "ImportProgress": "importer",
    "ImportResult": "importer",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AlreadyExists",
    "Command",
    "Conflict",
    "Coordinator",
    "CoordinatorError",
    "Copy",
    "CreateFile",
    "CursorAhead",
    "CursorExpired",
    "Delete",
    "DirectoryNotEmpty",
    "Event",
    "GroupTx",
    "ImportProgress",
    "ImportResult",
    "InvalidArgument",
    "InvalidConfiguration",
    "InvalidContent",
    "InvalidEvent",
    "InvalidImport",
    "InvalidMove",
    "InvalidName",
    "InvalidPath",
    "IsADirectory",
    "MergeMetadata",
    "Mkdir",
    "Move",
    "MutationResult",
    "Node",
    "NotADirectory",
    "NotFound",
    "NotMigrated",
    "OutcomeUnknown",
    "Partition",
    "Rename",
    "SearchHit",
    "SearchPage",
    "SetMetadata",
    "Settings",
    "TooLarge",
    "Unavailable",
    "UnknownEvent",
    "WriteFile",
]
