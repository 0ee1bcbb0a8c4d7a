"""How long other tenants' writes wait to become readable while a big import runs.

    python bench/bench_import_readers.py [--lines 500000] [--partitions 4]

Starts its own PostgreSQL (see bench/README.md). One thread imports ``--lines`` files
(directories of 50) into the namespace ``big``; meanwhile two tenants write one directory
every 20 ms each: ``far``, a namespace of another partition than ``big``, and ``near``,
one of the same partition. Four log readers follow the log with ``read_events`` (as the
worker's partitions and the change feed do): ``far`` by namespace, ``far``'s partition,
``near``'s partition (that is ``big``'s), and the whole log. For every write acknowledged
while the import ran, each reader's delay from the acknowledgement to the read that
returned it is reported (median, max), with the import's own time and the time it held
the position lock (its events phase and commit).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterator

from common import load_average, median, migrated_cluster, now_utc, table
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.event_reader import Partition
from coordinator.importer import ImportProgress


def lines(n: int) -> Iterator[str]:
    for i in range(n):
        yield json.dumps({"path": f"/d{i // 50}/f{i}", "kind": "file", "content": "x"})


def partition_of(coord: Coordinator, ns: str, count: int) -> int:
    with coord.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT mod(hashtext(:ns)::bigint & 2147483647, :n)"), {"ns": ns, "n": count}
        ).scalar_one())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args(argv)
    print(f"{now_utc()}, load {load_average()}, {args.lines:,} lines")
    with migrated_cluster() as (_, url), Coordinator.connect(url, pool_size=12) as coord:
        n = args.partitions
        big_p = partition_of(coord, "big", n)
        far = next(f"far{i}" for i in range(1000) if partition_of(coord, f"far{i}", n) != big_p)
        near = next(f"near{i}" for i in range(1000) if partition_of(coord, f"near{i}", n) == big_p)
        for ns in ("big", far, near):
            coord.create_namespace(ns)
        _, start = coord.read_events(wait=5.0)
        readers = {
            f"namespace {far}": {"namespaces": [far]},
            f"partition of {far}": {"partition": Partition(partition_of(coord, far, n), n)},
            f"partition of {near} (= big's)": {"partition": Partition(big_p, n)},
            "whole log": {},
        }
        acked: dict[int, float] = {}
        seen: dict[str, dict[int, float]] = {r: {} for r in readers}
        phases: dict[str, float] = {}
        stop = threading.Event()  # the writers
        last: list[int] = []  # the last write's position, once the writers stopped

        def progress(p: ImportProgress) -> None:
            phases.setdefault(p.phase, time.monotonic())

        def importer() -> None:
            phases["start"] = time.monotonic()
            coord.import_nodes("big", lines(args.lines), progress=progress)
            phases["committed"] = time.monotonic()

        def writer(ns: str) -> None:
            i = 0
            while not stop.is_set():
                made = coord.mkdir(ns, f"/w{i}")
                assert made.seq is not None
                acked[made.seq] = time.monotonic()
                i += 1
                time.sleep(0.02)

        def reader(name: str) -> None:
            cursor = start
            while not last or cursor < last[0]:  # until it read past the last write
                events, cursor = coord.read_events(
                    after=cursor, limit=100_000, wait=60.0, contents=False,
                    **readers[name],  # type: ignore[arg-type]
                )
                now = time.monotonic()
                for e in events:
                    seen[name].setdefault(e.position, now)
                if not events:
                    time.sleep(0.005)  # caught up: poll (the worker waits for a wake-up)

        threads = [threading.Thread(target=reader, args=(r,), daemon=True) for r in readers]
        threads += [threading.Thread(target=writer, args=(ns,), daemon=True) for ns in (far, near)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        run = threading.Thread(target=importer)
        run.start()
        run.join()
        time.sleep(1.0)
        stop.set()
        for t in threads[len(readers):]:
            t.join(60)
        last.append(max(acked))
        for t in threads[:len(readers)]:
            t.join(600)
        began, ended = phases["start"], phases["committed"]
        locked = ended - phases.get("events", ended)
        print(f"import {ended - began:.2f} s; events phase and commit (position lock held) "
              f"{locked:.2f} s")
        rows = []
        with coord.engine.connect() as conn:
            ns_of: dict[int, str] = dict(conn.execute(text(
                "SELECT position, namespace FROM events WHERE position = ANY(:p)"),
                {"p": list(acked)}).all())
        for name, got in seen.items():
            for ns in (far, near):
                during = [p for p, t in acked.items()
                          if began <= t <= ended and ns_of.get(p) == ns and p in got]
                if not during:
                    continue
                delays = [got[p] - acked[p] for p in during]
                rows.append([name, ns, len(during), f"{median(delays) * 1000:.0f}",
                             f"{max(delays) * 1000:.0f}"])
        print(table(["reader", "writes of", "n", "median ms", "max ms"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
