"""``verify`` over several shards into one index (docs/sharding.md, section 2): each
shard's log is checked against its own ``nodes`` (``verify_log``), and the index against
each shard's namespaces (``verify_index`` with the other shards' namespaces left to
them). Documents of a namespace no shard has are reported once, with the first shard's
run. Each report names its shard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator import Coordinator

from .progress import Progress
from .search_engine import SearchEngine
from .verify import LogReport, Settle, VerifyReport, verify_index, verify_log


@dataclass
class ShardVerify:
    """One shard's outcome: the index side for its namespaces, and its log."""

    shard: str
    index: VerifyReport
    log: LogReport | None


def verify_shards(
    shards: Sequence[tuple[str, Coordinator]],
    es: SearchEngine,
    *,
    alias: str,
    namespaces: Sequence[str] | None = None,
    repair_drift: bool = False,
    settle_for: Callable[[Coordinator], Settle | None] = lambda _: None,
    check_log: bool = True,
    progress: Progress | None = None,
) -> list[ShardVerify]:
    """Verify every shard (name, coordinator on it), in order. ``settle_for(coord)``: the
    wait for the live worker on that shard (its checkpoints), or None."""
    held = {name: set(coord.namespaces()) for name, coord in shards}
    out = []
    for i, (name, coord) in enumerate(shards):
        elsewhere = set().union(*(held[n] for n, _ in shards if n != name))
        mine = None if namespaces is None else [
            n for n in namespaces if n in held[name] or (i == 0 and n not in elsewhere)]
        index = verify_index(coord, es, alias=alias, namespaces=mine,
                             repair_drift=repair_drift, settle=settle_for(coord),
                             progress=progress, elsewhere=elsewhere, strays=i == 0)
        log = (verify_log(coord, namespaces=mine, progress=progress)
               if check_log and (mine is None or mine) else None)
        out.append(ShardVerify(name, index, log))
    return out
