"""Pathkeeper's coordinator: transactional namespace trees in PostgreSQL with an event log."""

from .api import Coordinator, GroupTx, Operation, Settings
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    CursorExpired,
    DirectoryNotEmpty,
    InvalidContent,
    InvalidMove,
    InvalidName,
    InvalidPath,
    IsADirectory,
    NotADirectory,
    NotFound,
    TooLarge,
    Unavailable,
)
from .eventlog import Event, Partition
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
    "InvalidContent",
    "InvalidMove",
    "InvalidName",
    "InvalidPath",
    "IsADirectory",
    "MutationResult",
    "Node",
    "NotADirectory",
    "NotFound",
    "Operation",
    "Partition",
    "Settings",
    "TooLarge",
    "Unavailable",
]
