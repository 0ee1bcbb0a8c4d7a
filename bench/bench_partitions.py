"""An experiment behind a design decision: would ``nodes`` partitioned by namespace let
an import meet 0.25 of a raw COPY (issue 15), and what would it cost every write?

    python bench/bench_partitions.py [--nodes 200000] [--partitions 1,64,512]

Starts its own PostgreSQL. Nothing here is the product's schema: the tables are built
for the experiment, shaped like ``nodes`` (the same columns, keys and self-referencing
foreign key; ``namespaces`` is left out, so every variant is spared that key alike).

* **The import**: 200,000 rows (``bench_import``'s tree), each way measured in one
  transaction: COPY into a plain table (the issue's ceiling); COPY into the ``nodes``
  shape with its keys (what an import pays today, without the events); COPY into a
  fresh table without keys, then the keys built and the table attached as the
  namespace's partition of a partitioned ``nodes`` (the foreign key checked set-wise on
  attach).
* **Every write**: one rename-like ``UPDATE`` (by namespace and id) through a prepared
  statement, 5,000 times on one connection, with a generic plan (what the server-side
  functions' statements run once cached) and with a custom one, on the plain table and
  on the partitioned one with each number of namespaces (partitions); commits not waiting
  for the disk (``synchronous_commit = off``), so the statement's own cost shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from bench_import import floor_rows, make_input, raw_rows
from common import load_average, migrated_cluster, now_utc, table

from coordinator.db import libpq_url

COLUMNS = (
    "namespace text NOT NULL, id uuid NOT NULL, parent_id uuid, "
    "parent_kind varchar(4) NOT NULL DEFAULT 'dir', name text NOT NULL, "
    "kind varchar(4) NOT NULL, content text, metadata jsonb NOT NULL DEFAULT '{}', "
    "version bigint NOT NULL DEFAULT 1, created_at timestamptz NOT NULL DEFAULT now(), "
    "updated_at timestamptz NOT NULL DEFAULT now()"
)
KEYS = (
    "PRIMARY KEY (namespace, id)",
    "UNIQUE (namespace, id, kind)",
    "UNIQUE (namespace, parent_id, name)",
)
PARENT_KEY = ("FOREIGN KEY (namespace, parent_id, parent_kind) "
              "REFERENCES {table} (namespace, id, kind)")
COPY_COLUMNS = "(namespace, id, parent_id, name, kind, content, metadata)"


def load(cur: psycopg.Cursor[object], table_name: str, root: object,
         rows: Sequence[tuple[object, ...]]) -> float:
    """Seconds to store the namespace's root and ``rows`` in ``table_name`` (COPY)."""
    t = time.perf_counter()
    cur.execute(f"INSERT INTO {table_name} (namespace, id, name, kind) "
                "VALUES ('imp', %s, '', 'dir')", (root,))
    with cur.copy(f"COPY {table_name} {COPY_COLUMNS} FROM STDIN") as copy:
        for row in rows:
            copy.write_row(("imp", *row[1:]))
    return time.perf_counter() - t


def import_ways(url: str, rows: list[tuple[object, ...]], root: object) -> dict[str, float]:
    """Seconds for each way of storing the rows (each in a transaction rolled back)."""
    took: dict[str, float] = {}
    with psycopg.connect(libpq_url(url)) as conn, conn.cursor() as cur:
        # The ceiling: a plain table.
        cur.execute(f"CREATE TEMP TABLE raw_x ({COLUMNS})")
        took["COPY into a plain table (the ceiling)"] = load(cur, "raw_x", root, rows)
        conn.rollback()

        # Today's shape: one table, keys maintained row by row.
        cur.execute(f"CREATE TABLE flat ({COLUMNS}, {', '.join(KEYS)}, "
                    f"{PARENT_KEY.format(table='flat')})")
        took["COPY into one table with its keys (today)"] = load(cur, "flat", root, rows)
        conn.rollback()

        # A fresh partition: load, build the keys, attach.
        cur.execute(f"CREATE TABLE part ({COLUMNS}, {', '.join(KEYS)}, "
                    f"{PARENT_KEY.format(table='part')}) PARTITION BY LIST (namespace)")
        cur.execute("CREATE TABLE part_other PARTITION OF part FOR VALUES IN ('other')")
        cur.execute(f"CREATE TABLE part_imp ({COLUMNS})")
        loading = load(cur, "part_imp", root, rows)
        loaded = time.perf_counter()
        for key in KEYS:
            cur.execute(f"ALTER TABLE part_imp ADD {key}")
        # Says what ATTACH would otherwise scan the table to prove.
        cur.execute("ALTER TABLE part_imp ADD CHECK (namespace = 'imp')")
        keyed = time.perf_counter()
        cur.execute("ALTER TABLE part ATTACH PARTITION part_imp FOR VALUES IN ('imp')")
        end = time.perf_counter()
        took["fresh table: COPY"] = loading
        took["fresh table: build the keys"] = keyed - loaded
        took["fresh table: attach (foreign key checked set-wise)"] = end - keyed
        took["fresh table, whole"] = loading + end - loaded
        conn.rollback()
    return took


def write_costs(url: str, partition_counts: list[int], n: int) -> list[list[str]]:
    """Microseconds per rename-like UPDATE, generic and custom plans, plain vs partitioned."""
    out: list[list[str]] = []
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for count in [0, *partition_counts]:
            name = "plain" if count == 0 else f"p{count}"
            if count == 0:
                conn.execute(f"CREATE TABLE {name} ({COLUMNS}, {', '.join(KEYS)})")
            else:
                conn.execute(f"CREATE TABLE {name} ({COLUMNS}, {', '.join(KEYS)}) "
                             "PARTITION BY LIST (namespace)")
                for i in range(count):
                    conn.execute(f"CREATE TABLE {name}_{i} PARTITION OF {name} "
                                 f"FOR VALUES IN ('ns{i}')")
            for i in range(max(count, 1)):
                conn.execute(
                    f"INSERT INTO {name} (namespace, id, parent_id, name, kind) "
                    "SELECT %s, gen_random_uuid(), NULL, '', 'dir'", (f"ns{i}",))
            target = conn.execute(f"SELECT namespace, id FROM {name} LIMIT 1").fetchone()
            assert target is not None
            row = [f"{'plain table' if count == 0 else f'{count} partitions'}"]
            for mode in ("force_generic_plan", "force_custom_plan"):
                with psycopg.connect(libpq_url(url), autocommit=True,
                                     options=f"-c plan_cache_mode={mode} "
                                     "-c synchronous_commit=off") as session:
                    sql = (f"UPDATE {name} SET version = version + 1, updated_at = now() "
                           "WHERE namespace = %s AND id = %s")
                    for _ in range(50):  # prepared, and the plan cached, by now
                        session.execute(sql, target, prepare=True)
                    t = time.perf_counter()
                    for _ in range(n):
                        session.execute(sql, target, prepare=True)
                    row.append(f"{(time.perf_counter() - t) / n * 1e6:.0f}")
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--partitions", default="1,64,512")
    ap.add_argument("--updates", type=int, default=5000)
    args = ap.parse_args(argv)
    print(f"bench_partitions {now_utc()}, {os.cpu_count()} CPUs, load {load_average()}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="pathkeeper-partitions-") as tmp, \
            migrated_cluster(settings={"max_locks_per_transaction": "1024"}) as (_pg, url):
        warm_root, warm_rows, _ = floor_rows(raw_rows(make_input(Path(tmp) / "w.jsonl", 5000)))
        import_ways(url, warm_rows, warm_root)  # warm-up: caches, the first plans
        lines = make_input(Path(tmp) / "tree.jsonl", args.nodes)
        root, rows, _events = floor_rows(raw_rows(lines))
        took = import_ways(url, rows, root)
        ceiling = took["COPY into a plain table (the ceiling)"]
        print(f"\nstoring {args.nodes:,} nodes (no events), seconds and the ceiling / it:")
        print(table(["way", "seconds", "ceiling / it"],
                    [[k, f"{v:.2f}", f"{ceiling / v:.2f}"] for k, v in took.items()]))
        counts = [int(c) for c in args.partitions.split(",") if c]
        print(f"\none rename-like UPDATE by (namespace, id), prepared, {args.updates:,} times, "
              "microseconds each:")
        print(table(["table", "generic plan", "custom plan"],
                    write_costs(url, counts, args.updates)))
    print(f"done {now_utc()}, load {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
