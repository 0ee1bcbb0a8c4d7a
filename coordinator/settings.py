"""The coordinator's settings: one frozen object, built by the caller, never at import."""

from __future__ import annotations

from dataclasses import dataclass

from . import paths

#: The longest line an import reads (bytes, without its end of line). The reader holds
#: one line at a time, so this bounds an import's memory whatever its input; it must
#: leave room for the longest file content allowed, as JSON (escapes can make a
#: string up to six times longer), and its metadata.
MAX_IMPORT_LINE_BYTES = 64 * 1024 * 1024

#: The placement rule that puts a new namespace on the server with the fewest nodes.
LEAST_LOADED = "least_loaded"


@dataclass(frozen=True)
class Settings:
    lock_timeout: float = 3.0
    #: A session left idle inside a transaction (a hung or dead client) is ended by
    #: the server after this long, releasing its locks.
    idle_in_transaction_timeout: float = 30.0
    max_retries: int = 8
    max_depth: int = paths.MAX_DEPTH
    #: The largest file content, in bytes of UTF-8 (see ``paths.MAX_CONTENT_BYTES``);
    #: a larger one is refused with ``TooLarge`` on every write path.
    max_content_bytes: int = paths.MAX_CONTENT_BYTES
    max_group_ops: int = 1000
    #: See ``MAX_IMPORT_LINE_BYTES``; a longer line refuses the import (``TooLarge``).
    max_import_line_bytes: int = MAX_IMPORT_LINE_BYTES
    notify: bool = True
    #: A process's wake-ups to the indexer are at least this far apart (seconds); the
    #: first after a quiet spell goes at once (see coordinator/notifier.py). Each is a
    #: committing transaction of its own: 8 writer processes at 10 ms cost 10-15 % of
    #: their renames/s (bench_coordinator.py), and a busy indexer does not wait for them.
    notify_interval: float = 0.05
    pool_size: int = 10
    max_overflow: int = 20
    pool_timeout: float = 10.0
    connect_timeout: float = 5.0
    #: Plan every statement for its own parameters instead of reusing a generic plan
    #: (PostgreSQL's ``plan_cache_mode = force_custom_plan``). For sessions whose
    #: statements take arrays of ids against tables that grow in bursts (the indexer):
    #: a generic plan made while ``nodes`` had no statistics, as after an import into a
    #: new database, read 1,000 nodes in 0.57 s instead of 0.03 s.
    custom_plans: bool = False
    #: With several database servers (a directory, docs/sharding.md): where a namespace
    #: created without a shard goes: ``least_loaded`` (the server taking new namespaces
    #: with the fewest nodes) or a server's name (``PATHKEEPER_PLACEMENT``).
    placement: str = LEAST_LOADED
