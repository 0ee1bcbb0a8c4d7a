"""Import benchmark: ``Coordinator.import_nodes`` nodes/s beside a raw COPY of the same rows.

    python bench/bench_import.py [--nodes 200000] [--rounds 3]
    python bench/bench_import.py --stream 10000000     # one big import, memory measured
    python bench/bench_import.py --fresh-tenants 60 --nodes 20000   # first import, new tenant

Starts its own PostgreSQL (see bench/README.md). The input is a JSON Lines file of
``--nodes`` lines (directories of 99 files each, shuffled: any order is allowed). Each
round, in alternating order:

* **import**: ``import_nodes`` of the file into a fresh empty namespace (everything:
  reading, parsing and checking each line in Python, COPY into a temp table, resolving
  parents, inserting into ``nodes`` with its constraints and indexes, one event per
  node, commit);
* **raw COPY (ceiling)**: the same rows (namespace, id, parent_id, name, kind, content,
  metadata), already built in memory, COPYed by psycopg into a plain table with the same
  columns and no index or constraint, in one transaction;
* **schema floor**: the same rows, already built in memory with ids in row order, COPYed
  into ``nodes`` itself (every index, check and foreign key) and one ``created`` event
  each (payload built beforehand) COPYed into ``events``, in one transaction: what
  PostgreSQL alone needs to store an import in this schema, with no parsing and no
  checks of ours.

Reports the three rates and the per-round ratios of the import to each ceiling (same
run, seconds apart).

``--stream N`` instead runs one import of N lines generated lazily (never held in memory,
never written to a file), and reports its time per phase and memory: this process's peak
RSS (``getrusage``), and, sampled every second, this process's RSS and the private memory
(``RssAnon``) of the database's backends, to show that memory stays flat as lines stream in
(the largest backend's peak per phase: the server's side of the bound).

``--fresh-tenants K`` instead measures the first import into one of K namespaces just
created, after an ANALYZE that saw each of them once (autovacuum's, past 50 new rows),
each round in a database of its own: with the schema's estimate of ``nodes.namespace``
(a thousandth of the rows, migration 0018) and with ANALYZE's own (which takes the column
for unique), alternating. Keep ``--nodes`` small: with ANALYZE's own estimate the
import's foreign-key checks grow with the square of its size.

``--code-before DIR`` (a checkout of older code) adds a fourth variant to each round: the
same import run by that code, so older and newer code are measured against the same floor
in one run, rounds alternating. With it, both imports run in a process of their own
(``python -c``, that checkout's code on its path), timed inside it after a warm-up import.

``--results FILE`` writes what was measured as JSON (``plots.write_results``); with
``--before FILE`` (the results of a run on older code) the import / schema floor ratios of
both runs are drawn side by side in ``bench/plots/import_vs_floor.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from common import ROOT, load_average, median, migrated_cluster, now_utc, table

from coordinator import Coordinator
from coordinator.db import libpq_url
from coordinator.importer import ImportProgress
from pathkeeper.local.postgres import LocalPostgres

FILES_PER_DIR = 99
VARIANTS = ["import", "raw", "floor"]
LABELS = {
    "import": "import_nodes (nodes + events, all checks)",
    "before": "import_nodes of --code-before",
    "raw": "raw COPY, plain table (the issue's ceiling)",
    "floor": "schema floor: COPY into nodes + events",
}


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


def floor_rows(rows: list[tuple[object, ...]]
               ) -> tuple[object, list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The schema floor's input, built in memory as the raw rows are: the root's id, the
    rows with ids that grow in row order (as the importer numbers its ids, so the indexes
    grow at one edge), and one ``created`` event per node (position, node id, type,
    payload as JSON text)."""
    ids = {r[1] for r in rows}
    old_root = next(r[2] for r in rows if r[2] not in ids)
    renumber = {old: uuid.UUID(int=(0x7 << 76) + i + 1) for i, old in
                enumerate([old_root] + [r[1] for r in rows])}
    rows = [(r[0], renumber[r[1]], renumber[r[2]], *r[3:]) for r in rows]
    root = renumber[old_root]
    paths = {r[1]: r[3] for r in rows}  # id -> name, for the paths below
    parents = {r[1]: r[2] for r in rows}

    def path_of(node: object) -> str:
        names: list[str] = []
        while node in paths:
            names.append(str(paths[node]))
            node = parents[node]
        return "/" + "/".join(reversed(names))

    events: list[tuple[object, ...]] = []
    for i, (_, node_id, parent, name, kind, content, _meta) in enumerate(rows):
        payload = {"id": str(node_id), "parent_id": str(parent), "name": name, "kind": kind,
                   "path": path_of(node_id), "content": content, "metadata": {},
                   "version": 1}
        events.append((65536 + i, node_id, "created", json.dumps(payload)))
    return root, rows, events


def run_schema_floor(url: str, rows: list[tuple[object, ...]],
                     events: list[tuple[object, ...]], root: object, ns: str,
                     without: Sequence[str] | None = None) -> tuple[float, float]:
    """The same rows COPYed into ``nodes`` itself (every index, check and foreign key)
    and their events into ``events``, in one transaction: what the database alone needs
    for an import into this schema, with no parsing and no checks of our own. Returns
    the whole time and the part that went into ``nodes``. With ``without`` (constraints
    of ``nodes`` dropped first, in the same transaction), the transaction rolls back:
    what each part of the schema costs, each measured on the same table."""
    rolled_back = without is not None
    with psycopg.connect(libpq_url(url)) as conn:
        for name in without or ():
            conn.execute(f"ALTER TABLE nodes DROP CONSTRAINT {name} CASCADE")
        conn.execute("INSERT INTO namespaces (name, root_id) VALUES (%s, %s)", (ns, root))
        conn.execute("INSERT INTO nodes (namespace, id, name, kind) VALUES (%s, %s, '', 'dir')",
                     (ns, root))
        if not rolled_back:
            conn.commit()
        t = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy("COPY nodes (namespace, id, parent_id, name, kind, content, metadata) "
                          "FROM STDIN") as copy:
                for row in rows:
                    copy.write_row((ns, *row[1:]))
            nodes_done = time.perf_counter()
            with cur.copy("COPY events (namespace, position, node_id, type, payload) "
                          "FROM STDIN") as copy:
                for event in events:
                    copy.write_row((ns, *event))
        if rolled_back:
            conn.rollback()
        else:
            conn.commit()
        return time.perf_counter() - t, nodes_done - t


#: ``--breakdown``: the schema floor with parts of ``nodes``' schema dropped, cumulatively.
FOREIGN_KEYS = ("fk_nodes_namespace", "fk_nodes_parent_is_dir")
UNIQUE_KEYS = ("uq_nodes_namespace_id_kind", "uq_nodes_namespace_parent_name")
BREAKDOWN: list[tuple[str, tuple[str, ...]]] = [
    ("nodes as they are", ()),
    ("without the namespace's foreign key", FOREIGN_KEYS[:1]),
    ("without both foreign keys", FOREIGN_KEYS),
    ("... and the two unique keys", FOREIGN_KEYS + UNIQUE_KEYS),
    ("... and the primary key (a heap, checks only)", FOREIGN_KEYS + UNIQUE_KEYS + ("pk_nodes",)),
]


#: ``--breakdown``: nodes per event row when the same payloads are batched.
BATCH = 1000


def batched(events: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The same ``created`` payloads, ``BATCH`` to an event row (``{"nodes": [...]}``): a
    format measured here and used nowhere, to see whether fewer, larger event rows would
    make the log cheaper to write."""
    out: list[tuple[object, ...]] = []
    for i in range(0, len(events), BATCH):
        chunk = events[i:i + BATCH]
        payload = '{"nodes": [' + ", ".join(str(e[3]) for e in chunk) + "]}"
        out.append((chunk[0][0], None, "batch", payload))
    return out


def copy_events_alone(url: str, events: list[tuple[object, ...]], ns: str) -> float:
    """COPY ``events`` into the log in a transaction rolled back; the seconds it took."""
    with psycopg.connect(libpq_url(url)) as conn:
        t = time.perf_counter()
        with conn.cursor() as cur, cur.copy(
            "COPY events (namespace, position, node_id, type, payload) FROM STDIN"
        ) as copy:
            for event in events:
                copy.write_row((ns, *event))
        took = time.perf_counter() - t
        conn.rollback()
        return took


def breakdown(url: str, rows: list[tuple[object, ...]], events: list[tuple[object, ...]],
              root: object, rounds: int) -> None:
    """Print what COPY into ``nodes`` costs with each part of its schema, and the events
    (one row per node, as written, and the same payloads batched)."""
    took: dict[str, list[float]] = {label: [] for label, _ in BREAKDOWN}
    event_times: list[float] = []
    batched_times: list[float] = []
    batches = batched(events)
    for rnd in range(rounds):
        for i, (label, without) in enumerate(BREAKDOWN):
            whole, nodes_part = run_schema_floor(url, rows, events, root, f"bd{rnd}_{i}",
                                                 without)
            took[label].append(nodes_part)
            event_times.append(whole - nodes_part)
        batched_times.append(copy_events_alone(url, batches, f"bd{rnd}_batched"))
    print("\nschema floor by part (COPY of the same rows, median seconds over rounds):")
    print(table(["COPY into nodes", "seconds"],
                [[label, f"{median(took[label]):.2f}"] for label, _ in BREAKDOWN]
                + [["COPY of the events (after the nodes)", f"{median(event_times):.2f}"],
                   [f"the same payloads batched, {BATCH:,} nodes per event row",
                    f"{median(batched_times):.2f}"]]))


def run_import(coord: Coordinator, path: Path, rnd: int,
               phases: dict[str, float] | None = None) -> tuple[float, int]:
    """Import the file into a fresh namespace: (seconds, nodes created); ``phases``
    receives the seconds of each phase the import reports (read, resolve, insert, events)."""
    ns = f"imp{rnd}"
    coord.create_namespace(ns)
    marks: list[tuple[str, float]] = [("read", time.perf_counter())]

    def progress(p: ImportProgress) -> None:
        if p.phase != marks[-1][0]:
            marks.append((p.phase, time.perf_counter()))

    t = marks[0][1]
    with path.open("rb") as f:
        result = coord.import_nodes(ns, f, progress=progress)
    took = time.perf_counter() - t
    if phases is not None:
        ends = [at for _, at in marks[1:]] + [t + took]
        for (name, at), end in zip(marks, ends, strict=True):
            phases[name] = phases.get(name, 0.0) + end - at
    return took, result.created


# One import in a process of its own, from the checkout on its path: prints its seconds,
# nodes created and seconds per phase as JSON.
IMPORT_ALONE = """
import json, sys, time
from coordinator import Coordinator
url, ns, path = sys.argv[1:4]
marks = []
def progress(p):
    if not marks or marks[-1][0] != p.phase:
        marks.append((p.phase, time.perf_counter()))
with Coordinator.connect(url) as coord:
    coord.create_namespace(ns)
    coord.import_nodes(ns, [json.dumps({"path": "/warm-up", "kind": "dir"})])
    t = time.perf_counter()
    marks.append(("read", t))
    with open(path, "rb") as f:
        result = coord.import_nodes(ns, f, progress=progress)
    took = time.perf_counter() - t
ends = [at for _, at in marks[1:]] + [t + took]
phases = {name: end - at for (name, at), end in zip(marks, ends)}
print(json.dumps({"seconds": took, "created": result.created, "phases": phases}))
"""


def run_import_alone(code: Path, url: str, path: Path, ns: str,
                     phases: dict[str, float] | None = None) -> tuple[float, int]:
    """``run_import`` by the code of checkout ``code``, in a process of its own."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALONE, url, ns, str(path)], cwd=code, check=True,
        env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True, text=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if phases is not None:
        phases.update(got["phases"])
    return float(got["seconds"]), int(got["created"])


def stream_lines(nodes: int) -> Iterator[bytes]:
    """``nodes`` JSON lines in ``make_input``'s shape (top directories, directories of 99
    files), generated one at a time, parents first: nothing of the input is kept."""
    made = 0
    d = 0
    while True:
        top = f"/top{d % 50}"
        folder = f"{top}/dir{d}"
        batch = ([f'{{"path": "{top}", "kind": "dir"}}\n'] if d < 50 else [])
        batch.append(f'{{"path": "{folder}", "kind": "dir"}}\n')
        for line in batch:
            if made == nodes:
                return
            yield line.encode()
            made += 1
        for f in range(FILES_PER_DIR):
            if made == nodes:
                return
            yield (f'{{"path": "{folder}/file{f}.txt", "kind": "file", '
                   f'"content": "content of file {f} in {d}"}}\n').encode()
            made += 1
        d += 1


def kib_of(pid: int | str, field: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_stream(url: str, nodes: int) -> dict[str, Any]:
    """One import of ``nodes`` lazily generated lines; time per phase, memory sampled.
    Returns what it measured (for ``--results``)."""
    samples: list[tuple[float, str, int, int, int]] = []  # t, phase, lines, self, backends
    current = [ImportProgress("read", 0, 0)]  # the last progress the import reported
    done = threading.Event()

    def sampler() -> None:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            while not done.wait(1.0):
                pids = [r[0] for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()").fetchall()]
                samples.append((time.perf_counter(), current[0].phase, current[0].lines,
                                kib_of("self", "VmRSS"),
                                max((kib_of(pid, "RssAnon") for pid in pids), default=0)))
                if len(samples) % 30 == 0:  # a line every ~30 s, to follow a long run
                    _, phase, lines, mine, backend = samples[-1]
                    print(f"  {phase}: {lines:,} lines, RSS {mine / 1024:.0f} MB, backend "
                          f"{backend / 1024:.0f} MB, load {load_average()}", flush=True)

    phases: list[tuple[str, float]] = []

    def progress(p: ImportProgress) -> None:
        if p.phase != current[0].phase:
            phases.append((p.phase, time.perf_counter()))
        current[0] = p

    with Coordinator.connect(url) as coord:
        coord.create_namespace("stream")
        watcher = threading.Thread(target=sampler, daemon=True)
        watcher.start()
        t = time.perf_counter()
        phases.append(("read", t))
        result = coord.import_nodes("stream", stream_lines(nodes), progress=progress)
        took = time.perf_counter() - t
        done.set()
        watcher.join()
    assert result.created == nodes, result.created
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"imported {nodes:,} lines in {took:.1f} s = {nodes / took:,.0f} rows/s; "
          f"peak RSS of this process {peak / 1024:.0f} MB; load {load_average()}")
    ends = [at for _, at in phases[1:]] + [t + took]
    print(table(["phase", "seconds"],
                [[name, f"{end - at:.1f}"] for (name, at), end in zip(phases, ends,
                                                                       strict=True)]))
    print("\nmemory while reading (every tenth of the samples; MB):")
    reading = [s for s in samples if s[1] == "read"]
    step = max(1, len(reading) // 10)
    print(table(["lines read", "this process RSS", "largest backend RssAnon"],
                [[f"{s[2]:,}", f"{s[3] / 1024:.0f}", f"{s[4] / 1024:.0f}"]
                 for s in reading[::step]]))
    backend_peaks: dict[str, float] = {}
    for s in samples:
        backend_peaks[s[1]] = max(backend_peaks.get(s[1], 0.0), s[4] / 1024)
    print("\nlargest backend's RssAnon by phase (MB, peak of the samples):")
    print(table(["phase", "MB"], [[k, f"{v:.0f}"] for k, v in backend_peaks.items()]))
    if samples:
        print(f"whole import: this process RSS max {max(s[3] for s in samples) / 1024:.0f} MB,"
              f" backends' RssAnon max {max(s[4] for s in samples) / 1024:.0f} MB")
    return {
        "lines": nodes, "seconds": took, "rows_per_s": nodes / took,
        "client_peak_rss_mb": peak / 1024,
        "backend_peak_rssanon_mb": max((s[4] for s in samples), default=0) / 1024,
        "backend_peak_rssanon_mb_by_phase": backend_peaks,
        "phases_s": {name: end - at for (name, at), end in zip(phases, ends, strict=True)},
        "load_end": load_average(),
    }


# The two estimates of nodes.namespace --fresh-tenants compares.
ESTIMATES = {
    "schema's": None,  # as migrated
    "ANALYZE's own": "ALTER TABLE nodes ALTER COLUMN namespace RESET (n_distinct)",
}


def run_fresh_tenants(pg: LocalPostgres, path: Path, nodes: int, tenants: int,
                      rounds: int) -> dict[str, Any]:
    """Per round and estimate, a database copied from the migrated one: ``tenants``
    namespaces created, ``ANALYZE nodes``, then the timed import of ``path`` into one of
    them. Returns the seconds of each estimate (for ``--results``)."""
    took: dict[str, list[float]] = {name: [] for name in ESTIMATES}
    names = list(ESTIMATES)
    for rnd in range(rounds):
        for name in names[rnd % 2:] + names[:rnd % 2]:
            url = pg.create_database(f"tenants_{rnd}_{names.index(name)}", template="bench")
            change = ESTIMATES[name]
            if change:
                with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                    conn.execute(change.encode())
            with Coordinator.connect(url) as coord:
                for k in range(tenants):
                    coord.create_namespace(f"tenant{k}")
                with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                    conn.execute("ANALYZE nodes")  # as autovacuum would, past 50 new rows
                t = time.perf_counter()
                with path.open("rb") as f:
                    created = coord.import_nodes("tenant1", f).created
                took[name].append(time.perf_counter() - t)
            assert created == nodes, created
            print(f"  round {rnd + 1}: {name} estimate: {took[name][-1]:.2f} s "
                  f"({nodes / took[name][-1]:,.0f} nodes/s); load {load_average()}",
                  flush=True)
    schema, own = (median(took[name]) for name in ESTIMATES)
    print(f"\nfirst import of {nodes:,} nodes into one of {tenants} new namespaces "
          f"(median of {rounds}): {own:.2f} s with ANALYZE's own estimate, {schema:.2f} s "
          f"with the schema's: {own / schema:.1f}x")
    return {"tenants": tenants, "seconds": took}


def _done(results_file: Path | None, results: dict[str, Any]) -> int:
    """The end of a run that measures one thing (``--stream``, ``--fresh-tenants``)."""
    print(f"done {now_utc()}, load {load_average()}")
    if results_file:
        # Imported here: matplotlib would add ~50 MB to the RSS that --stream reports.
        from plots import write_results
        write_results(results_file, results)
    return 0

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true",
                    help="also: what each part of nodes' schema costs the schema floor")
    ap.add_argument("--stream", type=int, metavar="N",
                    help="instead: one import of N lazily generated lines, memory measured")
    ap.add_argument("--fresh-tenants", type=int, metavar="K",
                    help="instead: the first import into one of K namespaces just created")
    ap.add_argument("--code-before", type=Path, metavar="DIR",
                    help="also import with the code of this checkout, each round")
    ap.add_argument("--results", type=Path, metavar="FILE",
                    help="write the measurements as JSON to FILE")
    ap.add_argument("--before", type=Path, metavar="FILE",
                    help="results of a run on older code: plot both (import / floor)")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {"started": now_utc(), "load_start": load_average(),
                               "nodes": args.nodes, "rounds": args.rounds}
    print(f"bench_import {now_utc()}, {os.cpu_count()} CPUs, load {load_average()}, "
          f"python {sys.version.split()[0]}", flush=True)
    if args.stream:
        with migrated_cluster() as (_pg, url):
            results["stream"] = run_stream(url, args.stream)
        return _done(args.results, results)
    if args.fresh_tenants:
        with tempfile.TemporaryDirectory(prefix="pathkeeper-import-") as tmp, \
                migrated_cluster() as (pg, _url):
            path = Path(tmp) / "tree.jsonl"
            make_input(path, args.nodes)
            results["fresh_tenants"] = run_fresh_tenants(pg, path, args.nodes,
                                                         args.fresh_tenants, args.rounds)
        return _done(args.results, results)
    with tempfile.TemporaryDirectory(prefix="pathkeeper-import-") as tmp, \
            migrated_cluster() as (_pg, url):
        path = Path(tmp) / "tree.jsonl"
        lines = make_input(path, args.nodes)
        rows = raw_rows(lines)
        print(f"input: {len(lines):,} lines, {path.stat().st_size / 1e6:.1f} MB", flush=True)
        root, floor_nodes, events = floor_rows(rows)
        variants = VARIANTS + (["before"] if args.code_before else [])
        rates: dict[str, list[float]] = {what: [] for what in variants}
        ratios: dict[str, list[float]] = {"raw": [], "floor": []}
        before_ratios: list[float] = []
        per_round: list[dict[str, Any]] = []
        with Coordinator.connect(url) as coord:
            # Warm-up (not counted): plans, caches, the first autovacuum of new tables.
            small = Path(tmp) / "warm.jsonl"
            make_input(small, 5000)
            run_import(coord, small, -1 + 1000)
            run_raw_copy(url, rows[:5000], 1000)
            for rnd in range(args.rounds):
                load = load_average()
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                took: dict[str, float] = {}
                phases: dict[str, float] = {}
                for what in order:
                    if what == "import" and args.code_before:
                        took[what], created = run_import_alone(ROOT, url, path, f"imp{rnd}",
                                                               phases)
                        assert created == args.nodes, created
                    elif what == "import":
                        took[what], created = run_import(coord, path, rnd, phases)
                        assert created == args.nodes, created
                    elif what == "before":
                        took[what], created = run_import_alone(
                            args.code_before, url, path, f"before{rnd}")
                        assert created == args.nodes, created
                    elif what == "raw":
                        took[what] = run_raw_copy(url, rows, rnd)
                    else:
                        took[what], floor_nodes_part = run_schema_floor(
                            url, floor_nodes, events, root, f"floor{rnd}")
                for what in variants:
                    rates[what].append(args.nodes / took[what])
                for ceiling in ratios:
                    ratios[ceiling].append(took[ceiling] / took["import"])
                if args.code_before:
                    before_ratios.append(took["floor"] / took["before"])
                    print(f"  round {rnd + 1}: import by --code-before {took['before']:.2f} s,"
                          f" its / floor {before_ratios[-1]:.2f}", flush=True)
                print(f"  round {rnd + 1}: import {took['import']:.2f} s, raw COPY "
                      f"{took['raw']:.2f} s, schema floor {took['floor']:.2f} s (nodes "
                      f"{floor_nodes_part:.2f} s); import / raw "
                      f"{ratios['raw'][-1]:.2f}, import / floor {ratios['floor'][-1]:.2f}; "
                      f"load {load} -> {load_average()}", flush=True)
                print("    import by phase: " + ", ".join(
                    f"{name} {secs:.2f} s" for name, secs in phases.items() if secs >= 0.005),
                    flush=True)
                per_round.append({"seconds": took, "floor_nodes_s": floor_nodes_part,
                                  "import_phases_s": phases, "load": [load, load_average()],
                                  "import_over_floor": ratios["floor"][-1],
                                  "import_over_raw": ratios["raw"][-1]})
                if args.code_before:
                    per_round[-1]["before_over_floor"] = before_ratios[-1]
        print()
        print(table(
            ["what", "median rows/s", "min", "max"],
            [[LABELS[what], f"{median(rates[what]):,.0f}", f"{min(rates[what]):,.0f}",
              f"{max(rates[what]):,.0f}"] for what in variants],
        ))
        print(f"\nimport / raw COPY (median of per-round ratios): {median(ratios['raw']):.2f}")
        print(f"import / schema floor (median of per-round ratios): "
              f"{median(ratios['floor']):.2f}")
        if args.code_before:
            print(f"import by --code-before / schema floor (same rounds): "
                  f"{median(before_ratios):.2f}")
            results["before_over_floor"] = median(before_ratios)
            results["code_before"] = str(args.code_before)
        results.update({
            "rounds_measured": per_round,
            "median_rows_per_s": {what: median(rates[what]) for what in variants},
            "import_over_floor": median(ratios["floor"]),
            "import_over_raw": median(ratios["raw"]),
        })
        if args.breakdown:
            breakdown(url, floor_nodes, events, root, args.rounds)
    print(f"done {now_utc()}, load {load_average()}")
    results["load_end"] = load_average()
    # Imported here: matplotlib would add ~50 MB to the RSS that --stream reports.
    from plots import read_results, write_results
    if args.results:
        write_results(args.results, results)
    if args.before and args.results:
        plot_against_floor(read_results(args.before), results)
    elif args.code_before and args.results:
        plot_against_floor(results, results, before_key="before_over_floor")
    return 0


def plot_against_floor(before: dict[str, Any], after: dict[str, Any],
                       before_key: str = "import_over_floor") -> Path:
    """import / schema floor before and after, per round and the median, in
    ``bench/plots/import_vs_floor.png``: two runs (each against its own floor), or one
    run of ``--code-before`` (``before_key="before_over_floor"``: both against the same
    floor, round by round)."""
    from plots import PLOTS_DIR, ratios_to_ceiling
    measures: dict[str, dict[str, float]] = {}
    for label, run, key in (("before", before, before_key),
                            ("after", after, "import_over_floor")):
        measures.setdefault("median", {})[label] = float(run[key])
        for i, rnd in enumerate(run.get("rounds_measured", []), 1):
            measures.setdefault(f"round {i}", {})[label] = float(rnd[key])
    same = before is after
    path = ratios_to_ceiling(
        measures, PLOTS_DIR / "import_vs_floor.png", goal=0.9,
        title=f"import / schema floor, {after.get('nodes', 0):,} nodes "
              + ("(both codes against the same floor, one run)" if same
                 else "(each run against its own floor)"),
        ylabel="import rows/s / schema floor rows/s")
    print(f"plot: {path}")
    return path


if __name__ == "__main__":
    sys.exit(main())
