"""Import benchmark: ``Coordinator.import_nodes`` nodes/s beside a raw COPY of the same rows.

    python bench/bench_import.py [--nodes 200000] [--rounds 3]

Starts its own PostgreSQL (see bench/README.md). The input is a JSON Lines file of
``--nodes`` lines (directories of 99 files each, shuffled: any order is allowed). Each
round, in alternating order:

* **import**: ``import_nodes`` of the file into a fresh empty namespace (everything:
  reading, parsing and checking each line in Python, COPY into a temp table, resolving
  parents, inserting into ``nodes`` with its constraints and indexes, one event per
  node, commit);
* **raw COPY (ceiling)**: the same rows (namespace, id, parent_id, name, kind, content,
  metadata), already built in memory, COPYed by psycopg into a plain table with the same
  columns and no index or constraint, in one transaction.

Reports both rates and the per-round ratio import / raw COPY (same run, seconds apart).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from common import load_average, median, migrated_cluster, now_utc, table

from coordinator import Coordinator
from coordinator.db import libpq_url

FILES_PER_DIR = 99


def make_input(path: Path, nodes: int, seed: int = 1) -> list[tuple[str, str, str]]:
    """Write the JSON Lines file; return (path, kind, content) of every line."""
    rows: list[tuple[str, str, str]] = []
    d = 0
    while len(rows) < nodes:
        top = f"/top{d % 50}"
        if d < 50:
            rows.append((top, "dir", ""))
        folder = f"{top}/dir{d}"
        rows.append((folder, "dir", ""))
        for f in range(FILES_PER_DIR):
            if len(rows) >= nodes:
                break
            rows.append((f"{folder}/file{f}.txt", "file", f"content of file {f} in {d}"))
        d += 1
    rows = rows[:nodes]
    random.Random(seed).shuffle(rows)
    with path.open("w") as out:
        for p, kind, content in rows:
            obj = {"path": p, "kind": kind}
            if kind == "file":
                obj["content"] = content
            out.write(json.dumps(obj) + "\n")
    return rows


def raw_rows(lines: list[tuple[str, str, str]]) -> list[tuple[object, ...]]:
    """The rows the import stores, with ids and parent ids, built in memory."""
    ids = {p: uuid.uuid4() for p, _, _ in lines}
    root = uuid.uuid4()
    out: list[tuple[object, ...]] = []
    for p, kind, content in lines:
        parent, _, name = p.rpartition("/")
        out.append(("raw", ids[p], ids.get(parent, root), name, kind,
                    content if kind == "file" else None, "{}"))
    return out


def run_raw_copy(url: str, rows: list[tuple[object, ...]], rnd: int) -> float:
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(
            f"CREATE TABLE raw_{rnd} (namespace text, id uuid, parent_id uuid, name text, "
            "kind text, content text, metadata jsonb)"
        )
        conn.commit()
        t = time.perf_counter()
        with conn.cursor() as cur, cur.copy(
            f"COPY raw_{rnd} (namespace, id, parent_id, name, kind, content, metadata) "
            "FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
        return time.perf_counter() - t


def run_import(coord: Coordinator, path: Path, rnd: int) -> tuple[float, int]:
    ns = f"imp{rnd}"
    coord.create_namespace(ns)
    t = time.perf_counter()
    with path.open("rb") as f:
        result = coord.import_nodes(ns, f)
    return time.perf_counter() - t, result.created


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"bench_import {now_utc()}, {os.cpu_count()} CPUs, load {load_average()}, "
          f"python {sys.version.split()[0]}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pathkeeper-import-") as tmp, \
            migrated_cluster() as (_pg, url):
        path = Path(tmp) / "tree.jsonl"
        lines = make_input(path, args.nodes)
        rows = raw_rows(lines)
        print(f"input: {len(lines):,} lines, {path.stat().st_size / 1e6:.1f} MB", flush=True)
        imports: list[float] = []
        raws: list[float] = []
        ratios: list[float] = []
        with Coordinator.connect(url) as coord:
            # Warm-up (not counted): plans, caches, the first autovacuum of new tables.
            small = Path(tmp) / "warm.jsonl"
            make_input(small, 5000)
            run_import(coord, small, -1 + 1000)
            run_raw_copy(url, rows[:5000], 1000)
            for rnd in range(args.rounds):
                load = load_average()
                order = ["import", "raw"] if rnd % 2 == 0 else ["raw", "import"]
                took: dict[str, float] = {}
                for what in order:
                    if what == "import":
                        took[what], created = run_import(coord, path, rnd)
                        assert created == args.nodes, created
                    else:
                        took[what] = run_raw_copy(url, rows, rnd)
                imports.append(args.nodes / took["import"])
                raws.append(args.nodes / took["raw"])
                ratios.append(took["raw"] / took["import"])
                print(f"  round {rnd + 1}: import {took['import']:.2f} s "
                      f"({imports[-1]:,.0f} nodes/s), raw COPY {took['raw']:.2f} s "
                      f"({raws[-1]:,.0f} rows/s), ratio {ratios[-1]:.2f}; load {load} -> "
                      f"{load_average()}", flush=True)
        print()
        print(table(
            ["what", "median rows/s", "min", "max"],
            [["import_nodes (nodes + events, all checks)", f"{median(imports):,.0f}",
              f"{min(imports):,.0f}", f"{max(imports):,.0f}"],
             ["raw COPY, plain table (ceiling)", f"{median(raws):,.0f}",
              f"{min(raws):,.0f}", f"{max(raws):,.0f}"]],
        ))
        print(f"\nimport / raw COPY (median of per-round ratios): {median(ratios):.2f}")
    print(f"done {now_utc()}, load {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
