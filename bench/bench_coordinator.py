"""Coordinator benchmark: renames/s beside a pgbench ceiling, O(1) directory renames, event reads.

Run: ``python bench/bench_coordinator.py`` (starts and removes its own PostgreSQL).
See bench/README.md for what each part measures, the numbers and the caveats.

1. Renames/s with N clients through ``Coordinator.rename`` (threads in one process,
   and processes), each client renaming its own files back and forth in its own
   directory ("disjoint") or all in one shared directory ("shared"), beside
   ``pgbench`` running the same statements a rename issues with N clients on the
   same database (the ceiling); with NOTIFY on and off. Variants alternate inside
   each round; medians over rounds are reported, ratios are medians of per-round ratios.
   ``--server-cpus 1`` pins PostgreSQL to one CPU and the clients (pgbench's too) to the
   others: a server with a core of its own, as where the clients run on other machines.
2. Renaming and moving a directory with 100,000 descendants vs a file.
3. ``read_events``: drain throughput, and commit-to-read latency under the write load of 1.
4. A file's lone rename, move and metadata change by the size of its content, beside
   the raw rename of the same row; lone writes of real text, the content compressed by
   pglz and by lz4; copies of a directory alone and in a group (``--parts 4``; not run
   by default).
5. Where a lone rename's client CPU goes, one client, layer by layer: the whole call,
   the statement on a held connection, psycopg with the connection's kept cursor and
   with a new cursor per statement, and ``SELECT 1`` (``--parts 5``; not run by default).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier as MpBarrier
from pathlib import Path
from typing import Any

import psycopg
from common import load_average, median, migrated_cluster, now_utc, percentile, pin_apart, table
from plots import PLOTS_DIR, ratios_to_ceiling, read_results, write_results

from coordinator import Coordinator, Copy, CreateFile, Mkdir, single_statement
from coordinator.commands import Rename
from coordinator.db import LoneConnection, libpq_url, lone_connection
from coordinator.event_appender import NOTIFY_CHANNEL, POSITION_LOCK_SQL

#: Files of one client are named ``client * NAME_CLIENT + i`` and, renamed, that plus
#: ``NAME_FLIP``: pure numbers, so pgbench can compute them with ``\\set``.
NAME_CLIENT = 1000
NAME_FLIP = 100_000

Sample = tuple[int, float]  # (event position of a rename, wall time when it returned)


def file_name(client: int, i: int, flipped: int) -> str:
    return str(client * NAME_CLIENT + i + flipped * NAME_FLIP)


def client_dir(layout: str, client: int) -> str:
    return f"/c{client}" if layout == "disjoint" else "/s"


# ----------------------------------------------------------------- test data


def seed_rename_files(url: str, ns: str, layout: str, clients: int, files: int) -> None:
    """Create the directories and files the rename workers expect, by direct SQL.

    Test-data setup only: rows are inserted straight into ``nodes`` (respecting its
    constraints) without events, because creating them through the API is not what
    is measured.
    """
    with psycopg.connect(libpq_url(url)) as conn:
        root = conn.execute("SELECT root_id FROM namespaces WHERE name = %s", (ns,)).fetchone()
        assert root is not None
        dirs: dict[str, uuid.UUID] = {}
        for k in range(clients):
            name = client_dir(layout, k)[1:]
            if name not in dirs:
                dirs[name] = uuid.uuid4()
                conn.execute(
                    "INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                    "VALUES (%s, %s, %s, %s, 'dir')",
                    (ns, dirs[name], root[0], name),
                )
            conn.execute(
                "INSERT INTO nodes (namespace, id, parent_id, name, kind, content) "
                "SELECT %s, gen_random_uuid(), %s, x, 'file', '' FROM unnest(%s::text[]) AS x",
                (ns, dirs[name], [file_name(k, i, 0) for i in range(files)]),
            )


def build_big_tree(url: str, ns: str, dirs: int, files_per_dir: int) -> float:
    """Create /big with ``dirs`` directories of ``files_per_dir`` files, plus /dst and
    /small/f, by direct SQL (test-data setup only, no events); returns seconds taken."""
    start = time.perf_counter()
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT root_id FROM namespaces WHERE name = %s", (ns,)).fetchone()
        assert row is not None
        root = row[0]
        ids = {name: uuid.uuid4() for name in ("big", "dst", "small")}
        for name, node_id in ids.items():
            conn.execute(
                "INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                "VALUES (%s, %s, %s, %s, 'dir')",
                (ns, node_id, root, name),
            )
        conn.execute(
            "INSERT INTO nodes (namespace, id, parent_id, name, kind, content) "
            "VALUES (%s, gen_random_uuid(), %s, 'f', 'file', '')",
            (ns, ids["small"]),
        )
        conn.execute(
            "INSERT INTO nodes (namespace, id, parent_id, name, kind) "
            "SELECT %s, gen_random_uuid(), %s, 'd' || g, 'dir' FROM generate_series(1, %s) g",
            (ns, ids["big"], dirs),
        )
        conn.execute(
            "INSERT INTO nodes (namespace, id, parent_id, name, kind, content) "
            "SELECT %s, gen_random_uuid(), d.id, 'f' || g, 'file', '' "
            "FROM nodes d, generate_series(1, %s) g WHERE d.namespace = %s AND d.parent_id = %s",
            (ns, files_per_dir, ns, ids["big"]),
        )
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("ANALYZE nodes")
    return time.perf_counter() - start


def count_descendants(url: str, ns: str, name: str) -> int:
    """Nodes below the top-level directory ``name``, counted in SQL."""
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "WITH RECURSIVE sub(id) AS ("
            " SELECT n.id FROM nodes n JOIN namespaces s ON s.name = n.namespace"
            " WHERE n.namespace = %s AND n.parent_id = s.root_id AND n.name = %s"
            " UNION ALL SELECT n.id FROM sub JOIN nodes n"
            " ON n.namespace = %s AND n.parent_id = sub.id"
            ") SELECT count(*) - 1 FROM sub",
            (ns, name, ns),
        ).fetchone()
    return int(row[0]) if row else 0


# ------------------------------------------------------- coordinator clients


def file_ids(url: str, ns: str, layout: str, client: int, files: int) -> list[str]:
    """The node ids of this client's files, in file order (a rename keeps a node's id)."""
    names = [file_name(client, i, 0) for i in range(files)]
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "SELECT f.name, f.id FROM nodes f JOIN nodes d ON d.namespace = f.namespace"
            " AND d.id = f.parent_id WHERE f.namespace = %s AND d.name = %s"
            " AND f.name = ANY(%s)",
            (ns, client_dir(layout, client)[1:], names),
        ).fetchall()
    by_name = {name: str(node_id) for name, node_id in rows}
    return [by_name[name] for name in names]


def rename_loop(
    coord: Coordinator,
    ns: str,
    layout: str,
    client: int,
    files: int,
    duration: float,
    samples: list[Sample] | None,
    ids: list[str] | None = None,
) -> tuple[int, float, float]:
    """Rename this client's files back and forth for ``duration`` s; (count, t0, t1) wall.
    With ``ids``, each file is named by its node id rather than by its path."""
    directory = client_dir(layout, client)
    count = 0
    t0 = time.time()
    deadline = t0 + duration
    while time.time() < deadline:
        i, flipped = count % files, (count // files) % 2
        ref = ids[i] if ids is not None else f"{directory}/{file_name(client, i, flipped)}"
        result = coord.rename(ns, ref, file_name(client, i, 1 - flipped))
        if samples is not None and result.seq is not None:
            samples.append((result.seq, time.time()))
        count += 1
    return count, t0, time.time()


def warm_pool(coord: Coordinator, n: int) -> None:
    """Open ``n`` pooled connections now, so the measurement does not include connecting."""
    conns = [coord.engine.connect() for _ in range(n)]
    for c in conns:
        c.close()


def run_threads(
    url: str, ns: str, layout: str, clients: int, files: int, duration: float, notify: bool,
    by_id: bool = False,
) -> float:
    """Renames/s of ``clients`` threads sharing one Coordinator (one pool); ``by_id``:
    each rename names its file by node id."""
    ids = [file_ids(url, ns, layout, k, files) if by_id else None for k in range(clients)]
    with Coordinator.connect(url, notify=notify, pool_size=clients) as coord:
        warm_pool(coord, clients)
        barrier = threading.Barrier(clients)

        def one(k: int) -> tuple[int, float, float]:
            barrier.wait()
            return rename_loop(coord, ns, layout, k, files, duration, None, ids[k])

        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(one, range(clients)))
    return rate(results)


def proc_worker(
    url: str,
    ns: str,
    layout: str,
    client: int,
    files: int,
    duration: float,
    notify: bool,
    barrier: MpBarrier,
    out: mp.Queue[tuple[int, float, float, list[Sample]]],
    sample: bool,
    ids: list[str] | None = None,
) -> None:
    """One client process: its own Coordinator and connection, started by ``barrier``;
    with ``ids``, it names its files by node id."""
    with Coordinator.connect(url, notify=notify, pool_size=1) as coord:
        warm_pool(coord, 1)
        barrier.wait(timeout=300)
        samples: list[Sample] | None = [] if sample else None
        count, t0, t1 = rename_loop(coord, ns, layout, client, files, duration, samples,
                                       ids)
        out.put((count, t0, t1, samples or []))


def run_procs(
    url: str,
    ns: str,
    layout: str,
    clients: int,
    files: int,
    duration: float,
    notify: bool,
    sample: bool = False,
    by_id: bool = False,
) -> tuple[float, list[Sample]]:
    """Renames/s of ``clients`` spawned processes, each with its own Coordinator;
    ``by_id``: each rename names its file by node id (looked up before the start)."""
    ids = [file_ids(url, ns, layout, k, files) if by_id else None for k in range(clients)]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(clients)
    out: mp.Queue[tuple[int, float, float, list[Sample]]] = ctx.Queue()
    procs = [
        ctx.Process(
            target=proc_worker,
            args=(url, ns, layout, k, files, duration, notify, barrier, out, sample, ids[k]),
        )
        for k in range(clients)
    ]
    for p in procs:
        p.start()
    results: list[tuple[int, float, float]] = []
    samples: list[Sample] = []
    try:
        for _ in procs:
            count, t0, t1, s = out.get(timeout=300 + duration)
            results.append((count, t0, t1))
            samples += s
    finally:
        for p in procs:
            p.join(timeout=30)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a worker process failed: {[p.exitcode for p in procs]}")
    return rate(results), samples


def rate(results: list[tuple[int, float, float]]) -> float:
    total = sum(r[0] for r in results)
    return total / (max(r[2] for r in results) - min(r[1] for r in results))


# ------------------------------------------------------------------ pgbench

RESOLVE = (
    "WITH RECURSIVE walk(id, kind, depth) AS ("
    " SELECT id, kind, 0 FROM nodes WHERE namespace = CAST(:ns AS text) AND parent_id IS NULL"
    " UNION ALL"
    " SELECT n.id, n.kind, w.depth + 1 FROM walk w JOIN nodes n"
    " ON n.namespace = CAST(:ns AS text) AND n.parent_id = w.id"
    " AND n.name = (CAST(ARRAY[{dir}, CAST(:old AS text)] AS text[]))[w.depth + 1]"
    " WHERE w.depth < 2"
    ") SELECT id, kind FROM walk ORDER BY depth"
)
NODE_COLUMNS = "id, parent_id, name, kind, version, content, metadata, created_at, updated_at"


def pgbench_script(layout: str, files: int, notify: bool) -> str:
    """The statements ``TreeTx.rename`` + ``EventAppender`` issue for one file rename
    (captured with log_statement=all), in one transaction, as a pgbench script.

    Each client renames its own files in turn, back and forth, like ``rename_loop``;
    client variables persist across a client's transactions, so ``:g`` counts them.
    """
    dir_expr = "'c' || CAST(:client_id AS text)" if layout == "disjoint" else "'s'"
    resolve = RESOLVE.format(dir=dir_expr)
    payload = (
        "format('{\"id\": \"%s\", \"kind\": \"file\", \"name\": \"%s\", \"path\": \"/%s/%s\", "
        "\"version\": %s, \"old_name\": \"%s\", \"old_path\": \"/%s/%s\", "
        "\"parent_id\": \"%s\", \"old_parent_id\": \"%s\"}', "
        f"CAST(:id AS text), CAST(:new AS text), {dir_expr}, CAST(:new AS text), "
        f"CAST(:f_version AS int) + 1, CAST(:old AS text), {dir_expr}, CAST(:old AS text), "
        "CAST(:f_parent_id AS text), CAST(:f_parent_id AS text))"
    )
    lines = [
        r"\set g :g + 1",
        rf"\set i :g % {files}",
        rf"\set r (:g / {files}) % 2",
        rf"\set old :client_id * {NAME_CLIENT} + :i + :r * {NAME_FLIP}",
        rf"\set new :client_id * {NAME_CLIENT} + :i + (1 - :r) * {NAME_FLIP}",
        "BEGIN;",
        resolve + r" \aset",
        f"SELECT {NODE_COLUMNS} FROM nodes WHERE namespace = CAST(:ns AS text) "
        r"AND id = CAST(:id AS uuid) FOR UPDATE \gset f_",
        resolve + ";",
        "UPDATE nodes SET parent_id = CAST(:f_parent_id AS uuid), name = CAST(:new AS text), "
        "version = version + 1, updated_at = now() "
        f"WHERE namespace = CAST(:ns AS text) AND id = CAST(:id AS uuid) RETURNING {NODE_COLUMNS};",
        # What EventAppender does before its block (see coordinator/event_appender.py).
        f"SELECT {POSITION_LOCK_SQL};",
        r"SELECT nextval('event_position_seq') AS pos \gset",
    ]
    if notify:
        lines.append("SELECT pg_notify('pathkeeper_events', '');")
    lines += [
        "INSERT INTO events (namespace, position, node_id, type, payload) VALUES "
        "(CAST(:ns AS text), CAST(:pos AS bigint), CAST(:id AS uuid), 'moved', "
        f"CAST({payload} AS jsonb));",
        "END;",
    ]
    return "\n".join(lines) + "\n"


def raw_script(layout: str, files: int) -> str:
    """PostgreSQL's own limit for a rename with an outbox event: per transaction one
    UPDATE of the file's row (found by its parent and name, one index probe) and one
    INSERT of its event; no path resolution, no lock protocol, no notify."""
    dir_expr = "'c' || CAST(:client_id AS text)" if layout == "disjoint" else "'s'"
    lines = [
        r"\set g :g + 1",
        rf"\set i :g % {files}",
        rf"\set r (:g / {files}) % 2",
        rf"\set old :client_id * {NAME_CLIENT} + :i + :r * {NAME_FLIP}",
        rf"\set new :client_id * {NAME_CLIENT} + :i + (1 - :r) * {NAME_FLIP}",
        "BEGIN;",
        "UPDATE nodes SET name = CAST(:new AS text), version = version + 1, updated_at = now() "
        "WHERE namespace = CAST(:ns AS text) AND parent_id = (SELECT id FROM nodes "
        "WHERE namespace = CAST(:ns AS text) AND parent_id = CAST(:root AS uuid) "
        f"AND name = {dir_expr}) AND name = CAST(:old AS text) RETURNING id \\gset",
        "INSERT INTO events (namespace, position, node_id, type, payload) VALUES "
        "(CAST(:ns AS text), nextval('event_position_seq'), CAST(:id AS uuid), 'moved', "
        "CAST(format('{\"id\": \"%s\", \"name\": \"%s\", \"old_name\": \"%s\"}', "
        "CAST(:id AS text), CAST(:new AS text), CAST(:old AS text)) AS jsonb));",
        "END;",
    ]
    return "\n".join(lines) + "\n"


def run_pgbench(
    bin_dir: Path, url: str, ns: str, layout: str, clients: int, files: int, duration: float,
    notify: bool, workdir: Path, raw: bool = False,
) -> float:
    """Transactions/s of pgbench with ``clients`` clients; checks every rename happened."""
    kind = "raw" if raw else ("notify" if notify else "quiet")
    script = workdir / f"rename_{layout}_{kind}.sql"
    script.write_text(raw_script(layout, files) if raw else pgbench_script(layout, files, notify))
    with psycopg.connect(libpq_url(url)) as conn:
        found = conn.execute("SELECT root_id FROM namespaces WHERE name = %s", (ns,)).fetchone()
        assert found is not None
        root = str(found[0])
    cmd = [
        str(bin_dir / "pgbench"), "-n", "-M", "prepared", "-c", str(clients),
        "-j", str(min(clients, os.cpu_count() or 1)), "-T", str(max(1, round(duration))),
        "-D", f"ns={ns}", "-D", "g=-1", "-D", f"root={root}", "-f", str(script),
        libpq_url(url),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", proc.stdout)
    done = re.search(r"actually processed: (\d+)", proc.stdout)
    if proc.returncode != 0 or tps is None or done is None:
        raise RuntimeError(f"pgbench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM events WHERE namespace = %s AND type = 'moved'", (ns,)
        ).fetchone()
        # Every file still has a name of its own: a rename that hit the wrong row (a
        # failed resolve leaves :id from the previous transaction) would duplicate one.
        names = conn.execute(
            "SELECT count(DISTINCT mod(CAST(name AS int), %s)), count(*) FROM nodes "
            "WHERE namespace = %s AND kind = 'file'",
            (NAME_FLIP, ns),
        ).fetchone()
    if row is None or row[0] != int(done.group(1)):
        raise RuntimeError(f"pgbench reported {done.group(1)} renames but logged {row}")
    if names is None or names[0] != names[1] or names[1] != clients * files:
        raise RuntimeError(f"pgbench renamed the wrong files: {names}")
    return float(tps.group(1))


# ------------------------------------------------------------ part 1: rates


@dataclass(frozen=True)
class Variant:
    runner: str  # "threads", "procs", "pgbench" or "raw" (pgbench: UPDATE + event only)
    layout: str  # "disjoint" or "shared"
    notify: bool
    by_id: bool = False  # renames name their file by node id

    @property
    def label(self) -> str:
        who = {"threads": "Coordinator, threads", "procs": "Coordinator, processes",
               "pgbench": "pgbench (ceiling)",
               "raw": "pgbench raw UPDATE + event (PostgreSQL's limit)"}[self.runner]
        ref = ", by id" if self.by_id else ""
        return f"{who}{ref}, {self.layout}, notify {'on' if self.notify else 'off'}"


SHORT = {"threads": "T", "procs": "P", "pgbench": "B", "raw": "R"}


@dataclass
class RateResults:
    by_variant: dict[Variant, list[float]] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)

    def per_round_ratio(self, a: Variant, b: Variant) -> float:
        pairs = zip(self.by_variant.get(a, []), self.by_variant.get(b, []), strict=False)
        return median([x / y for x, y in pairs if y > 0])


def bench_rates(
    pg_bin: Path, url: str, variants: list[Variant], rounds: int, clients: int, files: int,
    duration: float,
) -> RateResults:
    results = RateResults()
    with tempfile.TemporaryDirectory(prefix="pathkeeper-bench-") as tmp, Coordinator.connect(
        url
    ) as setup:
        workdir = Path(tmp)
        # Warm-up (not counted): caches, plans, the first autovacuum of new tables.
        warm = [Variant("pgbench", "disjoint", True), Variant("threads", "disjoint", True)]
        for n, v in enumerate(warm):
            ns = f"warm{n}"
            setup.create_namespace(ns)
            seed_rename_files(url, ns, v.layout, clients, files)
            run_variant(pg_bin, url, ns, v, clients, files, min(duration, 2.0), workdir)
        for rnd in range(rounds):
            # Alternate the order so no variant always runs first or last in a round.
            order = variants if rnd % 2 == 0 else list(reversed(variants))
            load_before = load_average()
            line = []
            for v in order:
                ns = f"r{rnd}_{variants.index(v)}"
                setup.create_namespace(ns)
                seed_rename_files(url, ns, v.layout, clients, files)
                value = run_variant(pg_bin, url, ns, v, clients, files, duration, workdir)
                results.by_variant.setdefault(v, []).append(value)
                code = (f"{SHORT[v.runner]}{v.layout[0]}{'N' if v.notify else 'q'}"
                        f"{'i' if v.by_id else ''}")
                line.append(f"{code}={value:,.0f}")
            results.loads.append(f"{load_before} -> {load_average()}")
            print(f"  round {rnd + 1}/{rounds}: {' '.join(line)}  load {results.loads[-1]}",
                  flush=True)
    return results


def run_variant(
    pg_bin: Path, url: str, ns: str, v: Variant, clients: int, files: int, duration: float,
    workdir: Path,
) -> float:
    if v.runner == "threads":
        return run_threads(url, ns, v.layout, clients, files, duration, v.notify, v.by_id)
    if v.runner == "procs":
        return run_procs(url, ns, v.layout, clients, files, duration, v.notify,
                         by_id=v.by_id)[0]
    if v.runner == "raw":
        return run_pgbench(pg_bin, url, ns, v.layout, clients, files, duration, False, workdir,
                           raw=True)
    return run_pgbench(pg_bin, url, ns, v.layout, clients, files, duration, v.notify, workdir)


def report_rates(res: RateResults, clients: int) -> None:
    rows: list[list[object]] = []
    for v, values in res.by_variant.items():
        ceiling = Variant("pgbench", v.layout, v.notify)
        ratio = (
            f"{res.per_round_ratio(v, ceiling):.2f}"
            if v.runner not in ("pgbench", "raw") and ceiling in res.by_variant else "-"
        )
        rows.append([v.label, f"{median(values):,.0f}", f"{min(values):,.0f}",
                     f"{max(values):,.0f}", ratio])
    print(f"\nFile renames/s, {clients} clients (median, min, max over rounds; "
          "ratio = median of per-round ratios to pgbench with the same layout and notify):")
    print(table(["variant", "median/s", "min", "max", "vs pgbench"], rows))
    raw_rows: list[list[object]] = []
    for v in res.by_variant:
        raw = Variant("raw", v.layout, False)
        if v.runner in ("threads", "procs") and raw in res.by_variant:
            raw_rows.append([v.label, f"{res.per_round_ratio(v, raw):.2f}"])
    if raw_rows:
        print("\nvs PostgreSQL's raw rename-with-event rate (same layout, per-round ratios):")
        print(table(["variant", "vs raw"], raw_rows))
    id_rows: list[list[object]] = []
    for v in res.by_variant:
        by_path = Variant(v.runner, v.layout, v.notify)
        if v.by_id and by_path in res.by_variant:
            id_rows.append([by_path.label, f"{res.per_round_ratio(v, by_path):.2f}"])
    if id_rows:
        print("\nby node id / by path (median of per-round ratios):")
        print(table(["variant", "id/path"], id_rows))
    quiet_rows: list[list[object]] = []
    for runner in ("threads", "procs", "pgbench"):
        for layout in ("disjoint", "shared"):
            on, off = Variant(runner, layout, True), Variant(runner, layout, False)
            if on in res.by_variant and off in res.by_variant:
                quiet_rows.append([f"{runner}, {layout}", f"{res.per_round_ratio(off, on):.2f}"])
    if quiet_rows:
        print("\nnotify off / notify on (median of per-round ratios):")
        print(table(["runner", "off/on"], quiet_rows))


def raw_ratios(res: RateResults) -> dict[str, float]:
    """Each Coordinator variant's median per-round ratio to the raw rename-with-event
    rate of the same layout, by a short label."""
    ratios: dict[str, float] = {}
    for v in res.by_variant:
        raw = Variant("raw", v.layout, False)
        if v.runner in ("threads", "procs") and raw in res.by_variant:
            form = "by id" if v.by_id else "by path"
            label = f"{v.runner}, {form}" + ("" if v.layout == "disjoint" and v.notify else
                                              f", {v.layout}, notify {'on' if v.notify else 'off'}")
            ratios[label] = res.per_round_ratio(v, raw)
    return ratios


def save_and_plot(res: RateResults, results: Path | None, before: Path | None,
                  label: str, plot: str) -> None:
    """Part 1's ratios to the raw rate as JSON (``results``) and as a picture (``plot``,
    in bench/plots), beside a ``before`` run's if given."""
    run = {"when": now_utc(), "label": label, "loads": res.loads, "ratios": raw_ratios(res)}
    if results is not None:
        write_results(results, run)
    runs = [read_results(before)] if before is not None else []
    runs.append(run)
    measures: dict[str, dict[str, float]] = {}
    for r in runs:
        for name, ratio in r["ratios"].items():
            measures.setdefault(name, {})[f"{r['label']} ({r['when']})"] = ratio
    path = ratios_to_ceiling(
        measures, PLOTS_DIR / plot, goal=0.5,
        title="Coordinator renames / PostgreSQL's raw rename-with-event rate (8 clients)")
    print(f"plot: {path}")


# -------------------------------------------------- part 2: big directories


def bench_big_tree(url: str, size: int, reps: int) -> None:
    ns = "tree"
    files_per_dir = 999 if size >= 1000 else max(1, size - 1)
    dirs = max(1, size // (files_per_dir + 1))
    with Coordinator.connect(url) as coord:
        coord.create_namespace(ns)
        took = build_big_tree(url, ns, dirs, files_per_dir)
        total = count_descendants(url, ns, "big")
        print(f"\nBuilt /big with {total:,} descendants by direct SQL in {took:.1f} s", flush=True)
        ops: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "rename file /small/f": (
                lambda: coord.rename(ns, "/small/f", "g"),
                lambda: coord.rename(ns, "/small/g", "f"),
            ),
            f"rename dir /big ({total:,} below)": (
                lambda: coord.rename(ns, "/big", "big2"),
                lambda: coord.rename(ns, "/big2", "big"),
            ),
            "move file /small/f -> /dst/f": (
                lambda: coord.move(ns, "/small/f", "/dst/f"),
                lambda: coord.move(ns, "/dst/f", "/small/f"),
            ),
            f"move dir /big -> /dst/big ({total:,} below)": (
                lambda: coord.move(ns, "/big", "/dst/big"),
                lambda: coord.move(ns, "/dst/big", "/big"),
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in ops}
        wal: dict[str, list[int]] = {k: [] for k in ops}
        with psycopg.connect(libpq_url(url), autocommit=True) as probe:

            def lsn() -> str:
                row = probe.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                assert row is not None
                return str(row[0])

            def wal_bytes(a: str, b: str) -> int:
                row = probe.execute("SELECT pg_wal_lsn_diff(%s, %s)", (b, a)).fetchone()
                assert row is not None
                return int(row[0])

            for _ in range(reps):
                for label, pair in ops.items():  # interleaved, so drift hits all alike
                    for fn in pair:
                        before = lsn()
                        t = time.perf_counter()
                        fn()
                        times[label].append(time.perf_counter() - t)
                        wal[label].append(wal_bytes(before, lsn()))
        # The tree is intact after all of that.
        assert coord.stat(ns, f"/big/d{dirs}/f{files_per_dir}").path == (
            f"/big/d{dirs}/f{files_per_dir}"
        )
    print(f"\nRename/move latency, single client, {2 * reps} calls each (both directions):")
    file_median = median(times["rename file /small/f"])
    rows = [
        [label, f"{median(v) * 1000:.2f}", f"{percentile(v, 0.9) * 1000:.2f}",
         f"{median(v) / file_median:.2f}", f"{median(wal[label]):,.0f}"]
        for label, v in times.items()
    ]
    print(table(["operation", "median ms", "p90 ms", "vs file rename", "WAL bytes"], rows))


# ------------------------------------------------------- part 3: event reads


def bench_events(url: str, clients: int, files: int, duration: float) -> None:
    with Coordinator.connect(url) as coord:
        # Drain everything parts 1 and 2 wrote, one reader, batches of 1000.
        cursor: int | None = None
        total = 0
        t = time.perf_counter()
        while True:
            events, cursor = coord.read_events(after=cursor, limit=1000)
            if not events:
                break
            total += len(events)
        took = time.perf_counter() - t
        print(f"\nread_events drain: {total:,} events in {took:.2f} s = "
              f"{total / took:,.0f} events/s (one reader, limit=1000)", flush=True)

        # Commit-to-read latency while `clients` processes rename (notify on).
        ns = "latency"
        coord.create_namespace(ns)
        seed_rename_files(url, ns, "disjoint", clients, files)
        seen: dict[int, float] = {}
        stop = threading.Event()
        errors: queue.Queue[BaseException] = queue.Queue()
        polls = [0]

        def reader(start: int | None) -> None:
            """Read like an indexer would: read_events until empty, then sleep until a
            NOTIFY (or 50 ms) instead of spinning."""
            pos = start
            try:
                with psycopg.connect(libpq_url(url), autocommit=True) as listener:
                    listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    while True:
                        finishing = stop.is_set()
                        events, pos = coord.read_events(after=pos, limit=1000, namespaces=[ns])
                        polls[0] += 1
                        now = time.time()
                        for e in events:
                            seen[e.position] = now
                        if not events:
                            if finishing:
                                return
                            for _ in listener.notifies(timeout=0.05, stop_after=1):
                                pass
            except BaseException as exc:  # reported by the main thread
                errors.put(exc)

        th = threading.Thread(target=reader, args=(cursor,))
        th.start()
        try:
            writes, samples = run_procs(url, ns, "disjoint", clients, files, duration, True, True)
        finally:
            stop.set()
            th.join()
        if not errors.empty():
            raise errors.get()
        lat = [seen[pos] - committed for pos, committed in samples if pos in seen]
        # An event that committed but that the reader never returned is a gap in the log.
        skipped = sum(1 for pos, _ in samples if pos not in seen)
        print(f"read_events latency under {clients} writer processes ({writes:,.0f} renames/s): "
              f"median {median(lat) * 1000:.1f} ms, p90 {percentile(lat, 0.9) * 1000:.1f} ms, "
              f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, max {max(lat) * 1000:.1f} ms "
              f"over {len(lat):,} events, {polls[0]:,} reads; committed but never returned "
              f"(skipped): {skipped}")


# --------------------------------------------------------------------- main


# ------------------------------------------- part 4: a change's cost by file size


def raw_rename_of(conn: psycopg.Connection[Any], ns: str, node_id: str, name: str) -> None:
    """PostgreSQL's own rename with its event, one transaction, nothing sent back."""
    with conn.transaction():
        conn.execute("UPDATE nodes SET name = %s, version = version + 1, updated_at = now() "
                     "WHERE namespace = %s AND id = %s", (name, ns, node_id))
        conn.execute("INSERT INTO events (namespace, position, node_id, type, payload) "
                     "VALUES (%s, nextval('event_position_seq'), %s, 'moved', "
                     "jsonb_build_object('id', %s::text, 'name', %s::text))",
                     (ns, node_id, node_id, name))


def file_changes(coord: Coordinator, raw: psycopg.Connection[Any], ns: str, node_id: str,
                 size: int) -> dict[str, Callable[[int], object]]:
    """The changes part 4 times on one file, each back and forth by its round ``k``."""

    def rename(k: int) -> object:
        return coord.rename(ns, node_id, f"f{size}_{k % 2}")

    def move(k: int) -> object:
        return coord.move(ns, node_id, f"/{'ab'[k % 2]}/f{size}")

    def set_metadata(k: int) -> object:
        return coord.set_metadata(ns, node_id, {"k": k})

    def raw_rename(k: int) -> object:
        raw_rename_of(raw, ns, node_id, f"r{size}_{k % 2}")
        return None

    return {"rename": rename, "move": move, "set_metadata": set_metadata,
            "raw rename": raw_rename}


def bench_file_sizes(url: str, sizes: list[int], reps: int) -> None:
    """A lone rename, move and metadata change of one file by its content's size (by
    id, one client), beside the raw rename of the same row: median wall and client CPU
    per change. What such a change sends back decides whether it grows with the file."""
    ns = "sizes"
    with Coordinator.connect(url, notify=False) as coord, \
            psycopg.connect(libpq_url(url), autocommit=True) as raw:
        coord.create_namespace(ns)
        coord.mkdir(ns, "/a")
        coord.mkdir(ns, "/b")
        rows = []
        for size in sizes:
            node_id = coord.create_file(ns, f"/a/f{size}", "x" * size).node.id
            ops = file_changes(coord, raw, ns, node_id, size)
            wall: dict[str, list[float]] = {k: [] for k in ops}
            cpu: dict[str, list[float]] = {k: [] for k in ops}
            for k in range(reps):
                for label, op in ops.items():  # interleaved: drift hits all alike
                    t, c = time.perf_counter(), time.process_time()
                    op(k)
                    wall[label].append(time.perf_counter() - t)
                    cpu[label].append(time.process_time() - c)
            rows.append([f"{size:,}", *(f"{median(wall[k]) * 1000:.2f} / "
                                        f"{median(cpu[k]) * 1000:.2f}" for k in ops),
                         f"{median(wall['rename']) / median(wall['raw rename']):.2f}"])
    print(f"\nA file's changes by its size, one client, by id, {reps} each (median ms, "
          f"wall / client CPU), load {load_average()}:")
    print(table(["content bytes", "rename", "move", "set_metadata", "raw rename",
                 "rename / raw"], rows))


def source_text(size: int, offset: int) -> str:
    """``size`` characters of real text (this Python's own standard library sources),
    starting ``offset`` files in, so each write stores different content."""
    files = sorted(Path(os.__file__).parent.glob("*.py"))
    parts, total, i = [], 0, offset
    while total < size:
        text = files[i % len(files)].read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        total += len(text)
        i += 1
    return "".join(parts)[:size].encode("ascii", "replace").decode()


def bench_write_compression(url: str, sizes: list[int], reps: int) -> None:
    """Lone writes of real text by size, with the content columns compressed by pglz
    (the server's default) and by lz4, alternated round by round: the write, the raw
    UPDATE of the row with its event (one transaction), a read of the content in the
    server (its md5: decompressed, not sent), and the size stored."""
    ns = "compression"
    methods = ("pglz", "lz4")
    with Coordinator.connect(url, notify=False) as coord, \
            psycopg.connect(libpq_url(url), autocommit=True) as raw:
        # The columns the migrations set to lz4, as the catalog has them.
        lz4_columns = raw.execute(
            "SELECT CAST(attrelid AS regclass)::text, attname FROM pg_attribute "
            "WHERE attcompression = 'l' AND NOT attisdropped").fetchall()
        if not lz4_columns:
            raise SystemExit("this server has no lz4: part 4's comparison needs it")
        coord.create_namespace(ns)
        ids = {size: coord.create_file(ns, f"/w{size}", "").node.id for size in sizes}
        bodies = {size: [source_text(size, 7 * k) for k in range(4)] for size in sizes}
        got: dict[tuple[int, str, str], list[float]] = {}
        stored: dict[tuple[int, str], int] = {}
        for k in range(reps):
            for method in methods if k % 2 == 0 else methods[::-1]:
                for table_name, column in lz4_columns:
                    raw.execute(f"ALTER TABLE {table_name} ALTER COLUMN {column} "
                                f"SET COMPRESSION {method}")
                for size in sizes:
                    body, node_id = bodies[size][k % 4], ids[size]
                    t = time.perf_counter()
                    coord.write_file(ns, node_id, body)
                    got.setdefault((size, method, "write"), []).append(time.perf_counter() - t)
                    t = time.perf_counter()
                    raw.execute("SELECT md5(content) FROM nodes WHERE namespace = %s "
                                "AND id = %s", (ns, node_id)).fetchone()
                    got.setdefault((size, method, "read"), []).append(time.perf_counter() - t)
                    row = raw.execute("SELECT pg_column_size(content) FROM nodes "
                                      "WHERE namespace = %s AND id = %s",
                                      (ns, node_id)).fetchone()
                    stored[(size, method)] = int(row[0]) if row else 0
                    t = time.perf_counter()
                    with raw.transaction():
                        raw.execute("UPDATE nodes SET content = %s, version = version + 1 "
                                    "WHERE namespace = %s AND id = %s", (body, ns, node_id))
                        raw.execute(
                            "INSERT INTO events (namespace, position, node_id, type, payload) "
                            "VALUES (%s, nextval('event_position_seq'), %s, 'written', "
                            "jsonb_build_object('content', %s::text))", (ns, node_id, body))
                    got.setdefault((size, method, "raw"), []).append(time.perf_counter() - t)
        for table_name, column in lz4_columns:  # back to the migrations' setting
            raw.execute(f"ALTER TABLE {table_name} ALTER COLUMN {column} SET COMPRESSION lz4")
    rows = [[f"{size:,}", method,
             *(f"{median(got[(size, method, what)]) * 1000:.1f}"
               for what in ("write", "raw", "read")),
             f"{stored[(size, method)]:,}"]
            for size in sizes for method in methods]
    print(f"\nA lone write of real text by its size and the columns' compression, {reps} "
          f"rounds, methods alternated (median ms), load {load_average()}:")
    print(table(["content chars", "compression", "write", "raw update + event",
                 "read in the server", "bytes stored"], rows))


def bench_copy(url: str, files: int, sizes: list[int], reps: int) -> None:
    """A copy of a directory of ``files`` files of real text, by size: alone (one
    statement, the events built in the server) and as a group of one (the events appended
    from the rows, so each content travels to the client and back), alternated."""
    ns = "copies"
    with Coordinator.connect(url, notify=False) as coord:
        coord.create_namespace(ns)
        coord.mkdir(ns, "/dst")
        rows = []
        for size in sizes:
            src = f"/s{size}"
            coord.apply(ns, [Mkdir(src), *(CreateFile(f"{src}/f{k}", source_text(size, k))
                                           for k in range(files))])
            took: dict[str, list[float]] = {"alone": [], "group": []}
            for k in range(reps):
                for how in ("alone", "group") if k % 2 == 0 else ("group", "alone"):
                    copy = Copy(src, "/dst", f"{how}{size}_{k}")
                    t = time.perf_counter()
                    if how == "alone":
                        coord.execute(ns, copy)
                    else:
                        coord.apply(ns, [copy])
                    took[how].append(time.perf_counter() - t)
            rows.append([f"{size:,}", f"{median(took['alone']) * 1000:.0f}",
                         f"{median(took['group']) * 1000:.0f}",
                         f"{median(took['group']) / median(took['alone']):.2f}"])
    print(f"\nA copy of a directory of {files} files by their size, {reps} each, alternated "
          f"(median ms), load {load_average()}:")
    print(table(["content chars", "alone", "in a group", "group / alone"], rows))


# ------------------------------- part 5: a lone rename's client CPU, layer by layer


def rename_layers(coord: Coordinator, ns: str, ids: list[str], by_id: bool,
                  conn: LoneConnection, raw: psycopg.Connection[Any]
                  ) -> dict[str, Callable[[], object]]:
    """The same lone rename at each layer part 5 times, from the whole call down to
    psycopg alone; each call renames the next file back or forth."""
    count = [0]

    def command() -> Rename:
        k = count[0]
        count[0] += 1
        i, flipped = k % len(ids), (k // len(ids)) % 2
        ref = ids[i] if by_id else f"/d/{'fg'[flipped]}{i}"
        return Rename(ref, f"{'gf'[flipped]}{i}")

    def statement() -> single_statement.Lone:
        lone = single_statement.lone(ns, command(), coord.settings)
        assert lone is not None
        return lone

    def whole() -> object:
        rename = command()
        return coord.rename(ns, rename.ref, rename.name)

    def send_held() -> object:
        return single_statement.send(conn, statement())

    def cursor_kept() -> object:
        lone = statement()
        return conn.fetch_one(lone.sql, lone.params)

    def cursor_each() -> object:  # what every lone statement did before the kept cursor
        lone = statement()
        return conn.fetch_one(lone.sql, lone.params, large=True)

    def select_1() -> object:
        return raw.execute("SELECT 1").fetchone()

    return {"Coordinator.rename (the whole call)": whole,
            "send on a held connection (no checkout, no retry loop)": send_held,
            "psycopg, the connection's kept cursor": cursor_kept,
            "psycopg, a new cursor per statement": cursor_each,
            "psycopg, SELECT 1 (a round trip's floor)": select_1}


def bench_client_layers(url: str, files: int, calls: int, rounds: int) -> None:
    """Client CPU (``time.process_time``) per lone rename at each layer, one client, by
    path and by id: medians over ``rounds`` of ``calls``, the layers alternating."""
    ns = "layers"
    with Coordinator.connect(url, notify=False) as coord, \
            psycopg.connect(libpq_url(url), autocommit=True) as raw:
        coord.create_namespace(ns)
        coord.mkdir(ns, "/d")
        ids = [str(coord.create_file(ns, f"/d/f{i}").node.id) for i in range(files)]
        rows = []
        with lone_connection(coord.engine) as conn:
            for by_id in (False, True):
                layers = rename_layers(coord, ns, ids, by_id, conn, raw)
                cpu: dict[str, list[float]] = {k: [] for k in layers}
                for _ in range(rounds):
                    for label, call in layers.items():
                        for _ in range(files * 2):  # warm: prepared, back where it began
                            call()
                        c = time.process_time()
                        for _ in range(calls):
                            call()
                        cpu[label].append((time.process_time() - c) / calls * 1e6)
                for label, values in cpu.items():
                    rows.append(("by id" if by_id else "by path", label,
                                 f"{median(values):.0f}",
                                 f"{min(values):.0f}-{max(values):.0f}"))
    print(f"\nPart 5: a lone rename's client CPU by layer, one client ({rounds} rounds of "
          f"{calls:,} calls, load {load_average()}):")
    print(table(["ref", "layer", "us (median)", "rounds"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--files", type=int, default=100, help="files per client")
    ap.add_argument("--tree-size", type=int, default=100_000, help="descendants of /big")
    ap.add_argument("--reps", type=int, default=11, help="renames each way in part 2")
    ap.add_argument("--no-procs", action="store_true", help="skip the multi-process variants")
    ap.add_argument("--quick", action="store_true",
                    help="only threads and processes (by path and by id; disjoint, notify on) "
                    "and the raw ceiling")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 1,2")
    ap.add_argument("--results", type=Path, help="write part 1's ratios to this JSON file")
    ap.add_argument("--before", type=Path,
                    help="a --results file of an earlier run, drawn beside this one")
    ap.add_argument("--label", default="this run", help="this run's name in the plot")
    ap.add_argument("--plot", default="renames_vs_raw.png",
                    help="part 1's picture, a file name in bench/plots")
    ap.add_argument("--server-cpus", type=int, default=0,
                    help="pin PostgreSQL to this many CPUs and every client (threads, "
                    "processes, pgbench) to the others (default 0: all share all)")
    args = ap.parse_args(argv)
    parts = {int(p) for p in args.parts.split(",") if p}
    if args.files >= NAME_CLIENT or args.clients * NAME_CLIENT >= NAME_FLIP:
        ap.error(f"--files must be < {NAME_CLIENT} and --clients < {NAME_FLIP // NAME_CLIENT}")

    variants = [
        Variant("threads", "disjoint", True),
        Variant("threads", "disjoint", True, by_id=True),
        Variant("threads", "disjoint", False),
        Variant("threads", "shared", True),
        Variant("pgbench", "disjoint", True),
        Variant("pgbench", "disjoint", False),
        Variant("pgbench", "shared", True),
        Variant("raw", "disjoint", False),
    ]
    if not args.no_procs:
        variants[3:3] = [
            Variant("procs", "disjoint", True),
            Variant("procs", "disjoint", True, by_id=True),
            Variant("procs", "disjoint", False),
            Variant("procs", "shared", True),
        ]
    if args.quick:
        variants = [Variant("threads", "disjoint", True),
                    Variant("threads", "disjoint", True, by_id=True),
                    Variant("procs", "disjoint", True),
                    Variant("procs", "disjoint", True, by_id=True),
                    Variant("raw", "disjoint", False)]
    print(f"bench_coordinator {now_utc()}, {os.cpu_count()} CPUs, load {load_average()}, "
          f"python {sys.version.split()[0]}", flush=True)
    with migrated_cluster() as (pg, url):
        if args.server_cpus:
            server, clients = pin_apart(pg, args.server_cpus)
            print(f"PostgreSQL on CPUs {server}, the clients on CPUs {clients}", flush=True)
        with psycopg.connect(libpq_url(url)) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            sync = conn.execute("SHOW synchronous_commit").fetchone()
        print(f"PostgreSQL {row[0] if row else '?'}, synchronous_commit={sync[0] if sync else '?'}",
              flush=True)
        if 1 in parts:
            print(f"\nPart 1: {len(variants)} variants x {args.rounds} rounds x {args.seconds:g} s "
                  "(T=threads P=processes B=pgbench; d=disjoint s=shared; N=notify q=quiet)",
                  flush=True)
            res = bench_rates(pg.bin_dir, url, variants, args.rounds, args.clients, args.files,
                              args.seconds)
            report_rates(res, args.clients)
            save_and_plot(res, args.results, args.before, args.label, args.plot)
        if 2 in parts:
            bench_big_tree(url, args.tree_size, args.reps)
        if 3 in parts:
            bench_events(url, args.clients, args.files, args.seconds)
        if 4 in parts:
            bench_file_sizes(url, [0, 65_536, 1 << 20, 8 << 20], args.reps * 10)
            bench_write_compression(url, [65_536, 1 << 20, (8 << 20) - 1024], args.reps * 2)
            bench_copy(url, 200, [0, 65_536, 262_144], args.reps * 2)
        if 5 in parts:
            bench_client_layers(url, 50, 3_000, args.rounds + 2)
    print(f"\ndone {now_utc()}, load {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
