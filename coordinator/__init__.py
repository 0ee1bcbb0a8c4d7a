"""Pathkeeper's coordinator: transactional namespace trees in PostgreSQL with an event log."""

from .api import Coordinator, GroupTx, Operation, Settings
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    CursorExpired,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidConfiguration,
    InvalidContent,
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
)
from .eventlog import Event, Partition
from .importer import ImportProgress, ImportResult
from .tree import MutationResult, Node

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Coordinator",
    "CoordinatorError",
    "CursorExpired",
    "DirectoryNotEmpty",
    "Event",
    "GroupTx",
    "ImportProgress",
    "ImportResult",
    "InvalidArgument",
    "InvalidConfiguration",
    "InvalidContent",
    "InvalidImport",
    "InvalidMove",
    "InvalidName",
    "InvalidPath",
    "IsADirectory",
    "MutationResult",
    "Node",
    "NotADirectory",
    "NotFound",
    "NotMigrated",
    "Operation",
    "Partition",
    "Settings",
    "TooLarge",
    "Unavailable",
]
