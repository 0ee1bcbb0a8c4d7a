"""The typed errors of the coordinator. Every database error is translated into one of these."""

from __future__ import annotations

import re


class CoordinatorError(Exception):
    """A coordinator operation failed."""

    code = "error"
    #: For a refused import: (line number, what is wrong) of the first bad lines.
    lines: tuple[tuple[int, str], ...] = ()
    #: For a refused import: how many bad lines were found (``lines`` keeps the first).
    lines_total: int = 0
    #: For a failed group of commands (``Coordinator.apply``, an HTTP batch): the
    #: position of the command that failed; nothing of the group applied.
    index: int | None = None

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class NotFound(CoordinatorError):
    """No such node or namespace."""

    code = "not_found"


class AlreadyExists(CoordinatorError):
    """A node with that name already exists in that directory (or the namespace exists)."""

    code = "already_exists"


class NotADirectory(CoordinatorError):
    """A path component, or the target, is a file where a directory is needed."""

    code = "not_a_directory"


class IsADirectory(CoordinatorError):
    """The target is a directory where a file is needed."""

    code = "is_a_directory"


class DirectoryNotEmpty(CoordinatorError):
    """The directory (or namespace) is not empty."""

    code = "directory_not_empty"


class InvalidName(CoordinatorError):
    """The name or path is not valid."""

    code = "invalid_name"


class InvalidPath(InvalidName):
    """The path is not an absolute, normalized path."""

    code = "invalid_path"


class InvalidContent(InvalidName):
    """File content or metadata cannot be stored (NUL, lone surrogates, not a JSON object)."""

    code = "invalid_content"


class InvalidImport(InvalidName):
    """Lines of an import cannot be imported as given (not JSON, a missing or unknown
    field, a path twice); ``lines`` lists them."""

    code = "invalid_import"


class InvalidMove(CoordinatorError):
    """The move is impossible: into itself or its own subtree, of the root, or deeper
    than the depth limit allows for the moved subtree."""

    code = "invalid_move"


class Conflict(CoordinatorError):
    """The node changed concurrently (version mismatch) or a lock wait timed out."""

    code = "conflict"


def is_version_mismatch(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed ``if_version`` check (not another conflict): the
    tree's SQL functions word it ``version is N, expected M`` (SQLSTATE PK004)."""
    return type(exc) is Conflict and _VERSION_MISMATCH.fullmatch(str(exc)) is not None


_VERSION_MISMATCH = re.compile(r"version is \d+, expected \d+")


class IdempotencyKeyReused(Conflict):
    """This Idempotency-Key was used for a different request."""

    code = "idempotency_key_reused"


class TooLarge(CoordinatorError):
    """The request exceeds a configured limit (group size, events per transaction)."""

    code = "too_large"


class Unavailable(CoordinatorError):
    """The database is unreachable or the operation timed out; the change may not have applied."""

    code = "unavailable"


class OutcomeUnknown(Unavailable):
    """The connection was lost after the change was sent to be committed (its COMMIT, or
    a statement that commits as it ends): it may or may not have applied, and nobody
    can tell from here. Retryable: with an idempotency key the retry answers the
    original outcome if it applied and applies it if not; without one, read back first.
    A database failover ends every connection to the old primary, so a change in
    flight then gets this (HTTP 503 with Retry-After)."""

    code = "outcome_unknown"


class NamespaceFrozen(Unavailable):
    """The namespace is being moved to another database server and takes no writes for
    a moment (its reads go on). Retryable after a second: HTTP 503 with Retry-After."""

    code = "namespace_frozen"


class NamespaceMoved(Unavailable):
    """The database server asked does not hold the namespace (any more, or not yet): the
    shard map was stale. ``Coordinator`` re-reads the map and runs the call once more on
    the namespace's server; this reaches a caller only if the map still names a server
    that refuses (a move that stopped halfway: ``pathkeeper shard move --resume``)."""

    code = "namespace_moved"


class NotMigrated(Unavailable):
    """The database has no Pathkeeper schema, or an older one: run ``pathkeeper db upgrade``."""

    code = "not_migrated"


class InvalidConfiguration(CoordinatorError):
    """A setting (a database or search server URL) cannot be used as given."""

    code = "invalid_configuration"


class InvalidArgument(CoordinatorError, ValueError):
    """An argument of a call is out of range (e.g. ``read_events(limit=0)``)."""

    code = "invalid_argument"


class InvalidEvent(CoordinatorError):
    """A stored event cannot be read: its payload lacks a key its type needs, or holds a
    value of the wrong type (``coordinator.events.decode``)."""

    code = "invalid_event"


class UnknownEvent(InvalidEvent):
    """A stored event has a type name, or a payload version, this code does not know:
    written by a newer coordinator (upgrade this reader) or by something else."""

    code = "unknown_event"


class CursorExpired(CoordinatorError):
    """The cursor points into the part of the event log that compaction deleted: the events
    right after it are gone, so reading on would skip them. Start again from the oldest
    position kept (``read_events(after="horizon")``) after reading the current state, or
    from the end of the log (``after="now"``); an indexer rebuilds (``pathkeeper replay``)."""

    code = "cursor_expired"

    def __init__(self, cursor: int, horizon: int) -> None:
        self.cursor = cursor
        self.horizon = horizon
        super().__init__(
            f"cursor {cursor} is older than the event log: events up to position {horizon} "
            f"were compacted; start again at the oldest event kept (after=horizon: "
            f"position {horizon}) once you have read the current state, or at the end of "
            "the log (after=now)"
        )


class CursorAhead(CoordinatorError):
    """The cursor is past the end of the event log: no reader of this log handed it out
    (made up, from another database, or from before a restore that took the log back).
    Reading on would skip every event up to it; start again as after compaction."""

    code = "cursor_ahead"

    def __init__(self, cursor: int, end: int) -> None:
        self.cursor = cursor
        self.end = end
        super().__init__(
            f"cursor {cursor} is past the end of the event log (position {end}): it was not "
            "handed out by this log, or the log was restored to an earlier state; start "
            "again from the current state and the end of the log (after=now), or at the "
            "oldest event kept (after=horizon)"
        )
