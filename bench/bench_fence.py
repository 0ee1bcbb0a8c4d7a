"""The shard fence's cost on writes: renames/s and group writes/s with the fence and without.

Run: ``python bench/bench_fence.py [--clients 4] [--seconds 3] [--rounds 5]`` (starts and
removes its own PostgreSQL). See bench/README.md ("bench_fence.py").

One cluster, two databases: ``fenced`` at the head (``pathkeeper_lock`` and
``pathkeeper_create`` call ``pathkeeper_check_placed``, and a group's claim checks each of
its namespaces) and ``unfenced`` migrated to the head then downgraded to 0014 (the lock
and the create as they were; the three fence functions dropped). A group's claim in
the unfenced database uses the claim without the fence (``position_claim_sql()``), so
both variants run the same Python code but that one statement. N client threads
rename their own files back and forth (a lone rename: one statement, fenced by the
lock) or run a group of a rename and a write (fenced by the lock and by the claim), for
``--seconds`` per variant; the variants alternate inside each round and the medians
over rounds are reported, with the median of the per-round ratios (the machine may be
loaded by others: adjacent runs see about the same load).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from common import load_average, median, migrated_cluster, now_utc, table
from sqlalchemy import text

import coordinator.event_appender as appender
from coordinator import Coordinator
from coordinator.db import driver_sql
from coordinator.migrate import downgrade, upgrade

FILES_PER_CLIENT = 20
T = TypeVar("T")


def seed(coord: Coordinator, clients: int) -> None:
    coord.create_namespace("t")
    for c in range(clients):
        coord.mkdir("t", f"/c{c}")
        for i in range(FILES_PER_CLIENT):
            coord.create_file("t", f"/c{c}/f{i}", "x")


#: Which of each client's files are renamed now, by (database, client): runs go on
#: from where the previous one of the same database left them.
_flipped: dict[tuple[int, int], list[bool]] = {}


def flips(coord: Coordinator, c: int) -> list[bool]:
    return _flipped.setdefault((id(coord), c), [False] * FILES_PER_CLIENT)


def lone_renames(coord: Coordinator, c: int, stop: threading.Event) -> int:
    n, flipped = 0, flips(coord, c)
    while not stop.is_set():
        i = n % FILES_PER_CLIENT
        old, new = (f"f{i}", f"g{i}") if not flipped[i] else (f"g{i}", f"f{i}")
        coord.rename("t", f"/c{c}/{old}", new)
        flipped[i] = not flipped[i]
        n += 1
    return n


def group_writes(coord: Coordinator, c: int, stop: threading.Event) -> int:
    n, flipped = 0, flips(coord, c)
    while not stop.is_set():
        i = n % FILES_PER_CLIENT
        old, new = (f"f{i}", f"g{i}") if not flipped[i] else (f"g{i}", f"f{i}")
        with coord.transaction("t") as tx:
            tx.rename(f"/c{c}/{old}", new)
            tx.write_file(f"/c{c}/{new}", str(n))
        flipped[i] = not flipped[i]
        n += 1
    return n


def rate(coord: Coordinator, work: Callable[[Coordinator, int, threading.Event], int],
         clients: int, seconds: float) -> float:
    stop = threading.Event()
    counts = [0] * clients

    def client(c: int) -> None:
        counts[c] = work(coord, c, stop)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - started)


def run_unfenced_claim(fn: Callable[[], T]) -> T:
    """``fn`` with the event log's claim as it was before the fence."""
    fenced = appender.TAKE_BLOCK_SQL
    plain = text(fenced.text.replace(
        appender.position_claim_sql("CAST(:nss AS text[])"), appender.position_claim_sql()))
    appender.TAKE_BLOCK_SQL = plain
    appender._TAKE_BLOCK = driver_sql(
        plain, binary=("nss", "nodes", "types", "payloads"))
    try:
        return fn()
    finally:
        appender.TAKE_BLOCK_SQL = fenced
        appender._TAKE_BLOCK = driver_sql(
            fenced, binary=("nss", "nodes", "types", "payloads"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{now_utc()}, load {load_average()}, {args.clients} clients, "
          f"{args.seconds} s per run, {args.rounds} rounds")
    with migrated_cluster("fenced") as (pg, fenced_url):
        unfenced_url = pg.create_database("unfenced")
        upgrade(unfenced_url)
        downgrade(unfenced_url, "0014_namespace_placement")
        with Coordinator.connect(fenced_url) as fenced, \
                Coordinator.connect(unfenced_url) as unfenced:
            seed(fenced, args.clients)
            run_unfenced_claim(lambda: seed(unfenced, args.clients))
            rows = []
            for label, work in (("lone rename", lone_renames), ("group rename+write",
                                                                 group_writes)):
                with_fence: list[float] = []
                without: list[float] = []
                ratios: list[float] = []
                for r in range(args.rounds):
                    # Alternate which goes first, so a drift of the load favours neither.
                    order = [True, False] if r % 2 == 0 else [False, True]
                    got: dict[bool, float] = {}
                    for fence in order:
                        if fence:
                            got[True] = rate(fenced, work, args.clients, args.seconds)
                        else:
                            got[False] = run_unfenced_claim(
                                partial(rate, unfenced, work, args.clients, args.seconds))
                    with_fence.append(got[True])
                    without.append(got[False])
                    ratios.append(got[True] / got[False])
                rows.append((label, f"{median(without):.0f}", f"{median(with_fence):.0f}",
                             f"{median(ratios):.3f}",
                             f"{min(ratios):.3f}-{max(ratios):.3f}"))
            print(table(("writes/s", "without fence", "with fence", "ratio (median)",
                         "ratio min-max"), rows))
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
