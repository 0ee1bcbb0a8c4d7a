"""``verify`` over several shards into one index (docs/sharding.md, section 2): each
shard's log is checked against its own ``nodes`` (``verify_log``), and the index against
each shard's namespaces (``verify_index`` with the other shards' namespaces left to
them). Documents of a namespace no shard has are reported once, with the first shard's
run. Each report names its shard."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator import Coordinator

from .progress import Progress
from .search_engine import SearchEngine
from .verify import VERIFY_DRIFT, LogReport, Settle, VerifyReport, verify_index, verify_log

logger = logging.getLogger("pathkeeper.verify")


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


def scheduled_verify_shards(
    shards: Sequence[tuple[str, Coordinator]],
    es: SearchEngine,
    alias: str,
    settle_for: Callable[[Coordinator], Settle | None],
) -> int:
    """``scheduled_verify`` over several shards: the drift of all of them as
    ``pathkeeper_verify_drift`` (-1 if any shard's run failed). Never raises."""
    try:
        results = verify_shards(shards, es, alias=alias, settle_for=settle_for,
                                check_log=False)
    except Exception:
        logger.exception("scheduled verify failed")
        VERIFY_DRIFT.set(-1)
        return -1
    drift = sum(len(r.index.drift) for r in results)
    VERIFY_DRIFT.set(drift)
    for r in results:
        if r.index.drift:
            logger.warning("verify: shard %s: %d drifted documents %s", r.shard,
                           len(r.index.drift), r.index.by_kind())
    if not drift:
        logger.info("verify: no drift in %d documents over %d shards",
                    sum(r.index.compared for r in results), len(results))
    return drift
