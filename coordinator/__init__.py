"""Pathkeeper's coordinator: transactional namespace trees in PostgreSQL with an event log."""

from .api import Coordinator, GroupTx
from .commands import Command, CreateFile, Delete, Mkdir, Move, Rename, WriteFile
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
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
    TooLarge,
    Unavailable,
    UnknownEvent,
)
from .eventlog import Event, Partition
from .importer import ImportProgress, ImportResult
from .settings import Settings
from .tree import MutationResult, Node

__all__ = [
    "AlreadyExists",
    "Command",
    "Conflict",
    "Coordinator",
    "CoordinatorError",
    "CreateFile",
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
    "Mkdir",
    "Move",
    "MutationResult",
    "Node",
    "NotADirectory",
    "NotFound",
    "NotMigrated",
    "Partition",
    "Rename",
    "Settings",
    "TooLarge",
    "Unavailable",
    "UnknownEvent",
    "WriteFile",
]
