"""What a rebuild over several shards asks beyond one server's (docs/sharding.md, section
2). The rebuild itself is ``indexer.replay.build_and_swap``, which takes the shards.

``replay --until P`` is a position of one shard's log: over several shards it needs the
shard named (``shard_for_until``), and builds that shard's audit index with
``rebuild``."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ReplayError


class UntilNeedsShard(ReplayError):
    """``--until`` over several shards without naming the shard whose log it is in."""


def shard_for_until(names: Sequence[str], shard: str | None) -> str:
    """The shard a ``replay --until`` reads: the one named, or the only one."""
    if shard is not None:
        if shard not in names:
            raise ReplayError(f"no shard {shard}: the shards are {', '.join(names)}")
        return shard
    if len(names) != 1:
        raise UntilNeedsShard(
            "--until is a position of one shard's event log: name the shard with --shard "
            f"(one of {', '.join(names)})")
    return names[0]
