"""Replay / reindex / verify: events folded per second beside the time PostgreSQL takes
to merely read the same events (the ceiling), for a namespace below and one above the
old spill size, from the start, ``--until`` half-way and from a snapshot; replay end to
end against the raw bulk rate of the same documents to the same server in the same run;
verify of a large namespace (seconds, peak memory); the event log's size per million
renames. The replay part runs ``--rounds`` rounds of raw read, set fold, raw bulk of the
documents replay writes (read back from a file of bulk actions, so memory stays bounded)
and replay end to end with its time by phase and peak resident size, then the medians.

    python bench/bench_replay.py                       # everything, default sizes
    python bench/bench_replay.py --fold-only           # only the fold part (no search)
    python bench/bench_replay.py --fold-only --big-nodes 1000000 --big-events 5000000
    python bench/bench_replay.py --skip-fold --skip-verify --docs 1000000 --events 5000000

The event log is generated directly in SQL (a valid history: a namespace, its
directories, its files, then renames and content writes of those files, in blocks
of 100 events per transaction, as the coordinator writes them), because creating a
million events through the API would take most of the run on these machines; the
fold and replay read it exactly as they read a real log. Elasticsearch is a
throwaway local node (``pathkeeper.local.search``: Elasticsearch, or noida-db with
``PATHKEEPER_SEARCH=noida``, whose search cost grows with index size, which weighs on
verify), or ``ES_URL``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from common import load_average, median, migrated_cluster, now_utc, table
from sqlalchemy import create_engine, text

from coordinator import Coordinator
from coordinator.db import sqlalchemy_url
from coordinator.migrate import upgrade
from coordinator.results import POSITION_BLOCK
from indexer import elasticsearch_index, replay_sources, setfold
from indexer.contract import index_action, is_indexed
from indexer.log_scan import current_bound
from indexer.progress import Progress
from indexer.replay import rebuild
from indexer.replay_loader import BULK_BYTES, BULK_CHUNK
from indexer.retention import take_snapshot
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from indexer.verify import verify_index, verify_log
from pathkeeper.local.search import new_local_search

PER_BLOCK = 100

GENERATE_SQL = f"""
WITH params AS (SELECT CAST(:ns AS text) AS ns, CAST(:dirs AS int) AS dirs,
                       CAST(:files AS int) AS files, CAST(:changes AS int) AS changes,
                       CAST(:first AS bigint) AS first),
seq AS (
    -- e = event number within this namespace's history (0 = namespace_created).
    SELECT 0 AS e, 'namespace_created' AS type, NULL::int AS j, 0 AS r
    UNION ALL SELECT i, 'created_dir', i - 1, 0 FROM params, generate_series(1, dirs) i
    UNION ALL SELECT dirs + i, 'created_file', i - 1, 0
              FROM params, generate_series(1, files) i
    UNION ALL SELECT dirs + files + k, CASE WHEN k % 4 = 0 THEN 'written' ELSE 'moved' END,
                     (k - 1) % files, (k - 1) / files + 1
              FROM params, generate_series(1, changes) k
)
INSERT INTO events (namespace, position, node_id, type, payload)
SELECT p.ns,
       p.first + (CAST(s.e AS bigint) / {PER_BLOCK}) * {POSITION_BLOCK} + s.e % {PER_BLOCK},
       CASE WHEN s.type = 'namespace_created' THEN md5(p.ns || 'root')::uuid
            WHEN s.type = 'created_dir' THEN md5(p.ns || 'd' || s.j)::uuid
            ELSE md5(p.ns || 'f' || s.j)::uuid END,
       CASE WHEN s.type LIKE 'created%' THEN 'created' ELSE s.type END,
       CASE s.type
         WHEN 'namespace_created' THEN jsonb_build_object('root_id', md5(p.ns || 'root')::uuid)
         WHEN 'created_dir' THEN jsonb_build_object(
             'id', md5(p.ns || 'd' || s.j)::uuid, 'parent_id', md5(p.ns || 'root')::uuid,
             'name', 'd' || s.j, 'kind', 'dir', 'path', '/d' || s.j, 'content', NULL,
             'metadata', '{{}}'::jsonb, 'version', 1)
         WHEN 'created_file' THEN jsonb_build_object(
             'id', md5(p.ns || 'f' || s.j)::uuid,
             'parent_id', md5(p.ns || 'd' || (s.j % p.dirs))::uuid,
             'name', 'f' || s.j, 'kind', 'file',
             'path', '/d' || (s.j % p.dirs) || '/f' || s.j,
             'content', 'file ' || s.j || ' says hello', 'metadata',
             jsonb_build_object('owner', 'u' || (s.j % 17)), 'version', 1)
         WHEN 'written' THEN jsonb_build_object(
             'id', md5(p.ns || 'f' || s.j)::uuid,
             'path', '/d' || (s.j % p.dirs) || '/f' || s.j || '_' || (s.r - 1),
             'content', 'revision ' || s.r, 'metadata',
             jsonb_build_object('owner', 'u' || (s.j % 17)), 'version', s.r + 1)
         ELSE jsonb_build_object(
             'id', md5(p.ns || 'f' || s.j)::uuid, 'kind', 'file',
             'old_parent_id', md5(p.ns || 'd' || (s.j % p.dirs))::uuid,
             'old_name', 'f' || s.j || '_' || (s.r - 1),
             'old_path', '/d' || (s.j % p.dirs) || '/f' || s.j || '_' || (s.r - 1),
             'parent_id', md5(p.ns || 'd' || (s.j % p.dirs))::uuid,
             'name', 'f' || s.j || '_' || s.r,
             'path', '/d' || (s.j % p.dirs) || '/f' || s.j || '_' || s.r, 'version', s.r + 1)
       END
FROM seq s, params p
"""


def generate(url: str, ns: str, dirs: int, files: int, changes: int) -> int:
    """Append a synthetic history for ``ns``; returns the number of events.

    Not a faithful copy of the coordinator's naming after a write (the fold does not
    read payload paths), but every event is valid for the fold: each ``moved`` and
    ``written`` names an existing file.
    """
    engine = create_engine(sqlalchemy_url(url))
    n = 1 + dirs + files + changes
    with engine.begin() as conn:
        last = int(conn.execute(text(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM event_position_seq"
        )).scalar_one())
        first = last + POSITION_BLOCK
        blocks = (n + PER_BLOCK - 1) // PER_BLOCK
        conn.execute(text(GENERATE_SQL), {"ns": ns, "dirs": dirs, "files": files,
                                          "changes": changes, "first": first})
        conn.execute(text("SELECT setval('event_position_seq', :v)"),
                     {"v": first + (blocks - 1) * POSITION_BLOCK})
    engine.dispose()
    return n


def materialize_nodes(url: str, folder: setfold.SetFold, ns: str) -> int:
    """Write ``nodes`` (and ``namespaces``) as the fold says, so that reindex and verify
    have a table to read; returns the node count."""
    tree = folder.trees[ns]
    rows = [
        {"ns": ns, "id": node.id, "parent": node.parent_id, "name": node.name,
         "kind": node.kind, "content": node.content, "md": json.dumps(node.metadata),
         "version": node.version}
        for node in tree.nodes()
    ]
    engine = create_engine(sqlalchemy_url(url))
    with engine.begin() as conn:
        # The foreign-key checks' cached plans were made on an empty table (sequential
        # scans), which makes a 100,000-row insert in one transaction quadratic. The rows
        # come from a consistent fold, so skip the triggers (the bench runs as superuser).
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text("INSERT INTO namespaces (name, root_id) VALUES (:ns, :root)"),
                     {"ns": ns, "root": rows[0]["id"]})
        conn.execute(text(
            "INSERT INTO nodes (namespace, id, parent_id, name, kind, content, metadata, "
            "version) VALUES (:ns, :id, :parent, :name, :kind, :content, CAST(:md AS jsonb), "
            ":version)"), rows)
        conn.execute(text("ANALYZE nodes"))
    engine.dispose()
    return len(rows)


def raw_bulk(es: SearchEngine, folder: setfold.SetFold, ns: str, index: str,
             alias: str | None = None) -> tuple[int, float]:
    """The documents of ``ns`` as replay writes them, bulk-loaded with the same client
    settings into an index created the same way; only the bulk is timed."""
    actions = [index_action(index, n, 1) for n in folder.trees[ns].nodes() if is_indexed(n)]
    elasticsearch_index.create_index(es, index)
    es.put_settings(index, {"index": {"refresh_interval": "-1"}})
    started = time.monotonic()
    for ok, info in es.streaming_bulk(actions, chunk_size=BULK_CHUNK,
                                     max_chunk_bytes=BULK_BYTES, max_retries=0,
                                     initial_backoff=2, max_backoff=600):
        assert ok, info
    es.refresh(index)
    seconds = time.monotonic() - started
    if alias is not None:
        es.update_aliases([{"add": {"index": index, "alias": alias}}])
    return len(actions), seconds


def verify_child(url: str, es_url: str, alias: str, ns: str) -> None:
    """Run in a child process so that the parent's memory is not counted. Linux keeps
    ``ru_maxrss`` across fork and exec (the child starts with the parent's peak), so
    the peak resident size is also sampled from /proc during the verify itself."""
    coord = Coordinator.connect(url)
    es = open_search(es_url, request_timeout=600)

    def resident_mib() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    before = resident_mib()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], resident_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    report = verify_index(coord, es, alias=alias, namespaces=[ns])
    done.set()
    sampler.join()
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"compared": report.compared, "drift": len(report.drift),
                      "seconds": report.seconds, "rss_before_mib": before,
                      "rss_peak_mib": peak[0], "ru_maxrss_mib": maxrss_kib / 1024}))


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                         text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


RAW_READ_SQL = (
    "COPY (SELECT position, namespace, type, node_id, payload, committed_at FROM events "
    "WHERE namespace = {ns} AND position <= {until}) TO STDOUT"
)


def raw_read(url: str, ns: str, until: int = 2**62) -> tuple[float, int, int]:
    """The ceiling: PostgreSQL reading the same events and sending them out as text, to a
    client that drops them (seconds, rows, bytes). The fold reads what this reads."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        conn.execute("SET jit = off")
        started = time.monotonic()
        rows = size = 0
        query = sql.SQL(RAW_READ_SQL).format(ns=sql.Literal(ns), until=sql.Literal(until))
        with conn.cursor().copy(query) as copy:
            for chunk in copy:
                size += len(chunk)
                rows += bytes(chunk).count(b"\n")
        return time.monotonic() - started, rows, size


def set_fold(url: str, ns: str, until: int, snapshots: bool = False
             ) -> tuple[setfold.SetFold, float]:
    coord = Coordinator.connect(url)
    started = time.monotonic()
    folded = setfold.fold(coord.engine, until=until, namespaces=[ns], use_snapshots=snapshots)
    return folded, time.monotonic() - started


def fold_part(args: argparse.Namespace, url: str, report: Callable[..., None]) -> None:
    """For a namespace below and one above the old spill size: raw read vs set fold,
    alternating, ``--rounds`` times; --until half-way; from a snapshot; streaming the
    result; the old sequential fold on a sample of the small one; verify_log of the big
    one."""
    sizes = [("below old spill size", "fs", args.small_nodes, args.small_events),
             ("above old spill size", "fb", args.big_nodes, args.big_events)]
    engine = create_engine(sqlalchemy_url(url))
    for label, ns, nodes, events in sizes:
        dirs = max(1, nodes // 100)
        files = nodes - 1 - dirs
        t = time.monotonic()
        n = generate(url, ns, dirs, files, events - nodes)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE events"))  # a log at rest, as autovacuum leaves it
        print(f"[{label}] generated {n:,} events ending in {nodes:,} nodes "
              f"in {time.monotonic() - t:.0f}s; load {load_average()}", flush=True)
        end = current_bound(engine)
        ratios = []
        for round_ in range(1, args.rounds + 1):
            raw_s, rows, size = raw_read(url, ns)
            assert rows == n, (rows, n)
            report(f"raw read, {label} (round {round_})", f"{n:,} events, {size / 2**20:.0f} MiB",
                   f"{raw_s:.1f}", f"{n / raw_s:,.0f} events/s")
            folded, fold_s = set_fold(url, ns, end)
            with folded:
                assert folded.node_count() == nodes and not folded.anomalies.count
                ratios.append(raw_s / fold_s)
                report(f"set fold, {label} (round {round_})",
                       f"{n:,} ev -> {nodes:,} nodes", f"{fold_s:.1f}",
                       f"{n / fold_s:,.0f} events/s = {raw_s / fold_s:.2f} x raw read "
                       f"(load {load_average().split()[0]})")
                if round_ == args.rounds:
                    t = time.monotonic()
                    streamed = sum(1 for _ in folded.trees[ns].nodes())
                    secs = time.monotonic() - t
                    report(f"  stream the folded nodes to Python, {label}", f"{streamed:,} nodes",
                           f"{secs:.1f}", f"{streamed / secs:,.0f} nodes/s")
        report(f"MEDIAN of {args.rounds}: set fold / raw read, {label}", f"{n:,} events", "",
               f"{median(ratios):.2f} x raw read")
        with engine.connect() as conn:
            half = int(conn.execute(text(
                "SELECT position FROM events WHERE namespace = :ns ORDER BY position "
                "OFFSET :k LIMIT 1"), {"ns": ns, "k": n // 2}).scalar_one())
        raw_s, rows, _ = raw_read(url, ns, half)
        folded, fold_s = set_fold(url, ns, half)
        folded.close()
        report(f"--until half-way, {label}", f"{rows:,} events", f"{fold_s:.1f}",
               f"{rows / fold_s:,.0f} events/s = {raw_s / fold_s:.2f} x raw read "
               f"({raw_s:.1f} s)")
        with engine.connect() as conn:
            at = int(conn.execute(text(
                "SELECT position FROM events WHERE namespace = :ns ORDER BY position "
                "OFFSET :k LIMIT 1"), {"ns": ns, "k": n * 4 // 5}).scalar_one())
        t = time.monotonic()
        snap = take_snapshot(engine, at)
        report(f"snapshot at 80 %, {label}", f"{snap.nodes:,} nodes stored",
               f"{time.monotonic() - t:.1f}", f"(all namespaces folded so far: "
               f"{snap.events_folded:,} events)")
        folded, fold_s = set_fold(url, ns, end, snapshots=True)
        with folded:
            assert folded.base.snapshot_id == snap.id and folded.node_count() == nodes
            report(f"fold from snapshot + 20 % tail, {label}",
                   f"{folded.events:,} tail events", f"{fold_s:.1f}",
                   f"{n / fold_s:,.0f} log events/s equivalent")
        with engine.begin() as conn:  # the next namespace's numbers start from the log again
            conn.execute(text("DELETE FROM log_snapshots"))
    # verify_log of the big namespace: nodes written from the fold, in SQL (setup only).
    materialize_sql(url, "fb")
    coord = Coordinator.connect(url)
    rep = verify_log(coord, namespaces=["fb"])
    assert rep.ok, (rep.drift[:3], rep.anomalies[:3])
    report("verify_log (set fold + join with nodes), above old spill size",
           f"{rep.events:,} events, {rep.nodes:,} nodes", f"{rep.seconds:.1f}",
           f"{rep.events / rep.seconds:,.0f} events/s")
    coord.close()
    engine.dispose()


class PhaseTimes(Progress):
    """``Progress`` that also notes when each phase began: replay's time by phase."""

    def __init__(self) -> None:
        super().__init__(enabled=True, tty=False, interval=60)
        self.marks: list[tuple[str, float]] = []

    def phase(self, name: str, total: int | None = None, unit: str = "documents") -> None:
        self.marks.append((name, time.monotonic()))
        super().phase(name, total, unit)

    def seconds(self, name: str, end: float) -> float:
        starts = [*self.marks, ("", end)]
        for (got, t0), (_, t1) in itertools.pairwise(starts):
            if got == name:
                return t1 - t0
        return 0.0


class PeakRss:
    """The process's resident size before and at its peak during a ``with`` block,
    sampled from /proc (``ru_maxrss`` keeps a peak from before the block)."""

    def __init__(self) -> None:
        self.before = self.peak = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def resident_mib() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            self.peak = max(self.peak, self.resident_mib())

    def __enter__(self) -> PeakRss:
        self.before = self.peak = self.resident_mib()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self.resident_mib())


def write_actions(url: str, ns: str, path: str) -> int:
    """The documents replay writes for ``ns``, as bulk actions, one JSON line each: the
    raw bulk's input, read back at disk speed so that the timed part is the bulk (and
    memory stays bounded at a million documents)."""
    folded, _ = set_fold(url, ns, current_bound(create_engine(sqlalchemy_url(url))))
    n = 0
    with folded, open(path, "w") as out:
        for node in folded.trees[ns].nodes():
            if is_indexed(node):
                out.write(json.dumps(index_action("", node, 1)) + "\n")
                n += 1
    return n


def raw_bulk_file(
    es: SearchEngine, path: str, index: str, limit: int | None = None
) -> tuple[int, float]:
    """``raw_bulk`` from a ``write_actions`` file: the same client settings into an index
    created the same way; the bulk (and the file's reading) is timed."""
    elasticsearch_index.create_index(es, index)
    es.put_settings(index, {"index": {"refresh_interval": "-1"}})

    def actions() -> Iterator[dict[str, Any]]:
        with open(path) as f:
            for line in itertools.islice(f, limit):
                action: dict[str, Any] = json.loads(line)
                action["_index"] = index
                yield action

    started = time.monotonic()
    docs = 0
    for ok, info in es.streaming_bulk(actions(), chunk_size=BULK_CHUNK,
                                     max_chunk_bytes=BULK_BYTES, max_retries=0,
                                     initial_backoff=2, max_backoff=600):
        assert ok, info
        docs += 1
    es.refresh(index)
    return docs, time.monotonic() - started


def materialize_sql(url: str, ns: str) -> None:
    """Write ``nodes`` (and ``namespaces``) of ``ns`` from its set fold, inside PostgreSQL
    (setup for reindex and verify_log: no row through Python)."""
    engine = create_engine(sqlalchemy_url(url))
    folded, _ = set_fold(url, ns, current_bound(engine))
    with folded:
        conn = folded.conn
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text("INSERT INTO namespaces (name, root_id) SELECT namespace, id FROM "
                          f"{folded.tables['nodes']} WHERE parent_id IS NULL"))
        conn.execute(text("INSERT INTO nodes (namespace, id, parent_id, name, kind, content, "
                          "metadata, version) SELECT namespace, id, parent_id, name, kind, "
                          f"content, metadata, version FROM {folded.tables['nodes']}"))
        conn.commit()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE nodes"))
    engine.dispose()


def replay_round(
    url: str, es: SearchEngine, n: int, path: str, round_: int,
    report: Callable[..., None],
) -> dict[str, float]:
    """One round, in this order: raw read, set fold, raw bulk of the same documents,
    replay end to end (fold + load + catch up + swap), with its time by phase."""
    load = load_average().split()[0]
    raw_s, _, _ = raw_read(url, "r")
    report(f"raw read of the log (COPY), round {round_}", f"{n:,} events", f"{raw_s:.1f}",
           f"{n / raw_s:,.0f} events/s (load {load})")
    folded, fold_s = set_fold(url, "r", current_bound(create_engine(sqlalchemy_url(url))))
    folded.close()
    report(f"set fold, round {round_}", f"{n:,} events", f"{fold_s:.1f}",
           f"{n / fold_s:,.0f} events/s = {raw_s / fold_s:.2f} x raw read")
    docs, bulk_s = raw_bulk_file(es, path, "bench-raw")
    es.delete_index("bench-raw")
    report(f"raw streaming_bulk, same docs, round {round_}", f"{docs:,} docs", f"{bulk_s:.1f}",
           f"{docs / bulk_s:,.0f} docs/s (load {load_average().split()[0]})")
    coord = Coordinator.connect(url)
    progress = PhaseTimes()
    with progress, PeakRss() as rss:
        result = rebuild(coord, es, source="events", alias="bench-nodes", progress=progress)
        end = time.monotonic()
    coord.close()
    fold_phase = progress.seconds("fold events", end)
    load_phase = progress.seconds("load documents", end)
    report(f"replay end to end (fold+load+swap), round {round_}",
           f"{n:,} ev -> {result.documents:,} docs", f"{result.seconds:.1f}",
           f"fold {fold_phase:.1f} s + load {load_phase:.1f} s "
           f"({result.documents / load_phase:,.0f} docs/s = "
           f"{bulk_s / load_phase:.2f} x raw bulk) + rest "
           f"{result.seconds - fold_phase - load_phase:.1f} s; end to end = "
           f"{(fold_s + bulk_s) / result.seconds:.2f} x (fold + raw bulk); "
           f"RSS {rss.before:.0f} -> peak {rss.peak:.0f} MiB "
           f"(load {load_average().split()[0]})")
    return {"raw_read": raw_s, "fold": fold_s, "bulk": bulk_s, "replay": result.seconds,
            "replay_fold": fold_phase, "replay_load": load_phase, "docs": result.documents,
            "rss_peak": rss.peak, "rss_before": rss.before}


def replay_part(
    args: argparse.Namespace, url: str, es: SearchEngine, report: Callable[..., None]
) -> None:
    """Generate the long history, then ``--rounds`` rounds of: raw read, set fold, raw
    bulk of its documents, replay end to end; medians; then reindex."""
    dirs = max(1, args.docs // 100)
    files = args.docs - dirs
    changes = args.events - 1 - dirs - files
    t = time.monotonic()
    n = generate(url, "r", dirs, files, changes)
    engine = create_engine(sqlalchemy_url(url))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE events"))  # a log at rest, as autovacuum leaves it
    print(f"generated {n:,} events ({files:,} files, {dirs:,} dirs, {changes:,} renames "
          f"and writes) in {time.monotonic() - t:.1f}s; load {load_average()}", flush=True)
    with engine.connect() as conn:
        size = int(conn.execute(text(
            "SELECT pg_total_relation_size('events')")).scalar_one())
    engine.dispose()
    print(f"event log: {size / n:.0f} bytes/event on disk with indexes "
          f"({size / 2**20:.0f} MiB) -> ~{size / n * 1e6 / 2**30:.2f} GiB per million "
          "renames", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "actions.jsonl")
        docs = write_actions(url, "r", path)
        print(f"{docs:,} documents written to {os.path.getsize(path) / 2**20:.0f} MiB of "
              "bulk actions (the raw bulk's input)", flush=True)
        # Untimed: the search server's first bulk pays for class loading and JIT.
        raw_bulk_file(es, path, "bench-warmup", limit=50_000)
        es.delete_index("bench-warmup")
        rounds = [replay_round(url, es, n, path, r + 1, report) for r in range(args.rounds)]

    def med(key: str) -> float:
        return median([r[key] for r in rounds])

    report(f"MEDIAN of {len(rounds)}: set fold / raw read", f"{n:,} events",
           f"{med('fold'):.1f} / {med('raw_read'):.1f}",
           f"{median([r['raw_read'] / r['fold'] for r in rounds]):.2f} x raw read")
    report(f"MEDIAN of {len(rounds)}: replay load / raw bulk", f"{docs:,} docs",
           f"{med('replay_load'):.1f} / {med('bulk'):.1f}",
           f"{median([r['bulk'] / r['replay_load'] for r in rounds]):.2f} x raw bulk rate")
    report(f"MEDIAN of {len(rounds)}: replay end to end", f"{n:,} events",
           f"{med('replay'):.1f}",
           f"{median([(r['fold'] + r['bulk']) / r['replay'] for r in rounds]):.2f} x "
           f"(fold + raw bulk); peak RSS {max(r['rss_peak'] for r in rounds):.0f} MiB")
    if args.no_reindex:
        return
    materialize_sql(url, "r")
    coord = Coordinator.connect(url)
    with Progress(enabled=True, tty=False, interval=60) as progress:
        result = rebuild(coord, es, source="snapshot", alias="bench-nodes", progress=progress)
    report("reindex end to end (snapshot+load+swap)", f"{result.documents:,} docs",
           f"{result.seconds:.1f}", f"{result.documents / result.seconds:,.0f} docs/s")
    coord.close()


#: The issue's two logs: (a) an import-heavy one, (b) a churn-heavy one.
SCENARIOS = ("import", "churn")
SCENARIO_NS = {"import": "ia", "churn": "ch"}
GOAL = 0.8  # replay end to end at this share of the raw bulk rate of its documents


def import_log(url: str, ns: str, nodes: int, renames: int) -> int:
    """(a): one import of ``nodes`` lines (``bench_import``'s tree: top directories,
    directories of 99 files) through ``Coordinator.import_nodes``, then ``renames`` file
    renames through the Coordinator, in groups of 1,000 (one transaction each); returns
    the events written."""
    from bench_import import stream_lines

    from coordinator.commands import Rename

    coord = Coordinator.connect(url)
    coord.create_namespace(ns)
    t = time.monotonic()
    result = coord.import_nodes(ns, stream_lines(nodes), timeout=3600)
    print(f"[import] {result.created:,} nodes imported in {time.monotonic() - t:.1f}s",
          flush=True)
    with coord.engine.connect() as conn:
        files = [str(p) for (p,) in conn.execute(text(
            "SELECT name FROM nodes WHERE namespace = :ns AND kind = 'file' "
            "ORDER BY id LIMIT :k"), {"ns": ns, "k": renames})]
        ids = [str(i) for (i,) in conn.execute(text(
            "SELECT id FROM nodes WHERE namespace = :ns AND kind = 'file' "
            "ORDER BY id LIMIT :k"), {"ns": ns, "k": renames})]
    t = time.monotonic()
    group = coord.settings.max_group_ops
    for start in range(0, len(ids), group):
        coord.apply(ns, [Rename(ref=i, name=f"r_{name}")
                         for i, name in zip(ids[start:start + group],
                                            files[start:start + group], strict=True)])
    print(f"[import] {len(ids):,} renames in {time.monotonic() - t:.1f}s", flush=True)
    coord.close()
    engine = create_engine(sqlalchemy_url(url))
    with engine.connect() as conn:
        n = int(conn.execute(text("SELECT count(*) FROM events WHERE namespace = :ns"),
                             {"ns": ns}).scalar_one())
    engine.dispose()
    return n


def scenario_log(args: argparse.Namespace, url: str, scenario: str) -> int:
    """Write the scenario's log into the (empty) database; returns its events."""
    ns = SCENARIO_NS[scenario]
    t = time.monotonic()
    if scenario == "import":
        n = import_log(url, ns, args.import_nodes, args.renames)
    else:
        dirs = max(1, args.docs // 100)
        n = generate(url, ns, dirs, args.docs - dirs, args.events - 1 - args.docs)
    engine = create_engine(sqlalchemy_url(url))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE events"))  # a log at rest, as autovacuum leaves it
    engine.dispose()
    print(f"[{scenario}] log of {n:,} events ready in {time.monotonic() - t:.0f}s; "
          f"load {load_average()}", flush=True)
    return n


def replay_timed(url: str, es: SearchEngine, alias: str) -> dict[str, float]:
    """Replay end to end into a new index behind ``alias``, with its phases."""
    coord = Coordinator.connect(url)
    progress = PhaseTimes()
    cpu = time.process_time()  # this process's CPU: replay's client, not PostgreSQL's
    with progress, PeakRss() as rss:
        result = rebuild(coord, es, source="events", alias=alias, progress=progress)
        end = time.monotonic()
    cpu = time.process_time() - cpu
    coord.close()
    phases = {"fold": progress.seconds("fold events", end),
              "load": progress.seconds("load documents", end),
              "tail": progress.seconds("catch up", end)}
    phases["other"] = result.seconds - sum(phases.values())
    return {"seconds": result.seconds, "docs": result.documents, **phases,
            "rss_peak_mib": rss.peak, "cpu_seconds": cpu}


def scenario_part(args: argparse.Namespace, es: SearchEngine, scenario: str,
                  report: Callable[..., None]) -> dict[str, Any]:
    """One scenario in a database of its own: its log, the documents replay writes (as a
    file of bulk actions, the raw bulk's input), then ``--rounds`` rounds of raw bulk and
    replay end to end, the order swapped every round; medians of each and of the ratio
    replay docs/s / raw docs/s."""
    with migrated_cluster(f"bench_replay_{scenario}") as (_pg, url), \
            tempfile.TemporaryDirectory() as tmp:
        n = scenario_log(args, url, scenario)
        path = os.path.join(tmp, "actions.jsonl")
        docs = write_actions(url, SCENARIO_NS[scenario], path)
        print(f"[{scenario}] {docs:,} documents, {os.path.getsize(path) / 2**20:.0f} MiB of "
              "bulk actions", flush=True)
        raw_bulk_file(es, path, "bench-warmup", limit=50_000)  # the node's JIT, untimed
        es.delete_index("bench-warmup")
        alias = f"bench-{scenario}"
        rounds: list[dict[str, Any]] = []
        variants = ["raw", "replay", *(["replay_whole"] if args.compare_whole else [])]
        for r in range(args.rounds):
            row: dict[str, Any] = {"round": r + 1}
            k = r % len(variants)
            for what in variants[k:] + variants[:k]:  # each first in turn
                load = load_average().split()[0]
                if what == "raw":
                    got, secs = raw_bulk_file(es, path, "bench-raw")
                    es.delete_index("bench-raw")
                    row["raw"] = {"seconds": secs, "docs": got, "loadavg": float(load)}
                    report(f"[{scenario}] raw bulk, round {r + 1}", f"{got:,} docs",
                           f"{secs:.1f}", f"{got / secs:,.0f} docs/s (load {load})")
                else:
                    # replay_whole: the whole fold before the load (the default).
                    parts = replay_sources.PART_EVENTS
                    replay_sources.PART_EVENTS = (0 if what == "replay_whole"
                                                  else args.part_events)
                    try:
                        rep = replay_timed(url, es, alias)
                    finally:
                        replay_sources.PART_EVENTS = parts
                    rep["loadavg"] = float(load)
                    row[what] = rep
                    report(f"[{scenario}] {what.replace('_', ', ')} fold, round {r + 1}"
                           if what == "replay_whole" else
                           f"[{scenario}] replay end to end, round {r + 1}",
                           f"{n:,} ev -> {rep['docs']:,} docs", f"{rep['seconds']:.1f}",
                           f"{rep['docs'] / rep['seconds']:,.0f} docs/s: fold "
                           f"{rep['fold']:.1f} + load {rep['load']:.1f} + tail "
                           f"{rep['tail']:.1f} + other {rep['other']:.1f} s, RSS peak "
                           f"{rep['rss_peak_mib']:.0f} MiB, client CPU "
                           f"{rep['cpu_seconds'] / rep['docs'] * 1e6:.0f} us/doc "
                           f"(load {load})")
            raw_rate = row["raw"]["docs"] / row["raw"]["seconds"]
            for what in variants[1:]:
                key = "ratio" if what == "replay" else "ratio_whole"
                row[key] = row[what]["docs"] / row[what]["seconds"] / raw_rate
                report(f"[{scenario}] {what} / raw bulk, round {r + 1}", "", "",
                       f"{row[key]:.2f} (goal {GOAL})")
            rounds.append(row)
        ratio = median([r["ratio"] for r in rounds])
        report(f"[{scenario}] MEDIAN of {len(rounds)}: replay / raw bulk", f"{docs:,} docs",
               f"{median([r['replay']['seconds'] for r in rounds]):.1f} / "
               f"{median([r['raw']['seconds'] for r in rounds]):.1f}", f"{ratio:.2f}")
        cpu_us = median([r["replay"]["cpu_seconds"] / r["replay"]["docs"] * 1e6
                         for r in rounds])
        report(f"[{scenario}] MEDIAN of {len(rounds)}: replay client CPU per document", "",
               "", f"{cpu_us:.1f} us")
        # replay --dry-run beside PostgreSQL merely reading the same events (COPY).
        read_s, _, _ = raw_read(url, SCENARIO_NS[scenario])
        coord = Coordinator.connect(url)
        dry = rebuild(coord, es, source="events", alias=alias, dry_run=True)
        coord.close()
        report(f"[{scenario}] replay --dry-run / raw read of the log",
               f"{dry.documents:,} docs", f"{dry.seconds:.1f} / {read_s:.1f}",
               f"(load {load_average().split()[0]})")
        for i in elasticsearch_index.alias_targets(es, alias):
            es.delete_index(i)
    whole = median([r["ratio_whole"] for r in rounds]) if args.compare_whole else None
    if whole is not None:
        report(f"[{scenario}] MEDIAN of {len(rounds)}: replay with the whole fold first / "
               "raw bulk", "", "", f"{whole:.2f}")
    return {"events": n, "docs": docs, "rounds": rounds, "median_ratio": ratio,
            "median_ratio_whole": whole,
            "dry_run_seconds": dry.seconds, "raw_read_seconds": read_s,
            "sizes": {"import_nodes": args.import_nodes, "renames": args.renames}
            if scenario == "import" else {"docs": args.docs, "events": args.events}}


def scenarios_main(args: argparse.Namespace, report: Callable[..., None]) -> None:
    """``--scenario``: the issue's logs, replay against the raw bulk; results as JSON and
    the plot of replay / raw bulk, before (``--before``) and now."""
    from plots import PLOTS_DIR, ratios_to_ceiling, read_results, write_results

    chosen = list(SCENARIOS) if args.scenario == "both" else [args.scenario]
    given = os.environ.get("ES_URL")
    # With ES_URL, that node (the ceiling and replay on the same one), none started here.
    with nullcontext() if given else new_local_search() as search:
        url = given if search is None else search.url
        assert url is not None
        es = open_search(url, request_timeout=600)
        results: dict[str, Any] = {"when": now_utc(), "label": args.label,
                                   "scenarios": {}}
        for scenario in chosen:
            results["scenarios"][scenario] = scenario_part(args, es, scenario, report)
        es.close()
    if args.results:
        write_results(args.results, results)
    runs = [read_results(args.before)] if args.before else []
    runs.append(results)
    labels = {"import": "(a) import 600k + renames", "churn": "(b) churn 100k / 1M events"}
    measures: dict[str, dict[str, float]] = {}
    for run in runs:
        for scenario, got in run["scenarios"].items():
            measures.setdefault(labels[scenario], {})[run["label"]] = got["median_ratio"]
            if got.get("median_ratio_whole") is not None:
                measures[labels[scenario]]["whole fold first (same run)"] = (
                    got["median_ratio_whole"])
    ratios_to_ceiling(measures, PLOTS_DIR / args.plot, goal=GOAL,
                      title="replay end to end / raw bulk of the same documents "
                            "(medians, same node, same run)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--docs", type=int, default=100_000,
                        help="live documents the replay history ends with")
    parser.add_argument("--verify-nodes", type=int, default=200_000)
    parser.add_argument("--small-nodes", type=int, default=100_000,
                        help="nodes of the namespace below the old spill size")
    parser.add_argument("--small-events", type=int, default=500_000)
    parser.add_argument("--big-nodes", type=int, default=1_000_000,
                        help="nodes of the namespace above the old spill size")
    parser.add_argument("--big-events", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of raw read / fold / raw bulk / replay (medians)")
    parser.add_argument("--no-reindex", action="store_true", help="skip reindex")
    parser.add_argument("--skip-verify", action="store_true", help="skip verify")
    parser.add_argument("--fold-only", action="store_true",
                        help="only the fold part (no search server)")
    parser.add_argument("--skip-fold", action="store_true", help="skip the fold part")
    parser.add_argument("--verify-only", action="store_true",
                        help="skip the fold/replay/reindex parts")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "both"],
                        help="the issue's logs: (a) import, (b) churn; replay end to end "
                             "against the raw bulk of its documents (nothing else runs)")
    parser.add_argument("--import-nodes", type=int, default=600_000,
                        help="--scenario import: nodes of the one import")
    parser.add_argument("--renames", type=int, default=100_000,
                        help="--scenario import: file renames after it")
    parser.add_argument("--results", type=Path, help="--scenario: write the results here")
    parser.add_argument("--before", type=Path,
                        help="--scenario: an earlier run's results, drawn beside these")
    parser.add_argument("--part-events", type=int, default=0,
                        help="--scenario: replay's fold in parts of this many events "
                             "(PATHKEEPER_REPLAY_FOLD_PART_EVENTS); 0: the whole fold")
    parser.add_argument("--compare-whole", action="store_true",
                        help="--scenario: also replay with the whole fold before the load, "
                             "in every round (beside --part-events)")
    parser.add_argument("--label", default="now", help="--scenario: this run's name")
    parser.add_argument("--plot", default="replay_vs_raw.png",
                        help="--scenario: the PNG written in bench/plots/")
    parser.add_argument("--verify-child", nargs=4, metavar=("URL", "ES", "ALIAS", "NS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.verify_child:
        verify_child(*args.verify_child)
        return

    logging.basicConfig(level=logging.INFO, format="  %(asctime)s %(message)s")
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    print(f"bench_replay {now_utc()}, load average {load_average()}")
    if args.events - 1 - args.docs < 0:
        parser.error("--events must exceed --docs")
    rows: list[list[object]] = []

    def report(*row: object) -> None:
        rows.append(list(row))
        print("  ".join(str(c) for c in row), flush=True)

    if args.scenario:
        scenarios_main(args, report)
        print(table(["what", "size", "seconds", "rate"], rows))
        print(f"load average at the end {load_average()}")
        return
    if args.fold_only:
        with migrated_cluster("bench_replay") as (_pg, url):
            fold_part(args, url, report)
        print(table(["what", "size", "seconds", "rate"], rows))
        print(f"load average at the end {load_average()}")
        return
    with migrated_cluster("bench_replay") as (_pg, url), new_local_search() as search:
        es_url = os.environ.get("ES_URL") or search.url
        es = open_search(es_url, request_timeout=600)
        if not args.verify_only and not args.skip_fold:
            # A database of its own: its million nodes must not weigh on the replay below.
            fold_url = _pg.create_database("bench_fold")
            upgrade(fold_url)
            fold_part(args, fold_url, report)
        if not args.verify_only:
            replay_part(args, url, es, report)
        if args.skip_verify:
            es.close()
            print(table(["what", "size", "seconds", "rate"], rows))
            print(f"load average at the end {load_average()}")
            return
        vdirs = max(1, args.verify_nodes // 100)
        generate(url, "v", vdirs, args.verify_nodes - vdirs - 1, 0)
        vfolder, _ = set_fold(url, "v", current_bound(create_engine(sqlalchemy_url(url))))
        materialize_nodes(url, vfolder, "v")
        docs, secs = raw_bulk(es, vfolder, "v", "bench-verify-v1", alias="bench-verify")
        vfolder.close()
        report("(load for verify)", f"{docs:,} docs", f"{secs:.1f}", f"{docs / secs:,.0f} docs/s")
        es.close()
        v = run_child("--verify-child", url, es_url, "bench-verify", "v")
        report("verify one namespace", f"{v['compared']:,} docs, drift {v['drift']}",
               f"{v['seconds']:.1f}",
               f"RSS {v['rss_before_mib']:.0f} -> peak {v['rss_peak_mib']:.0f} MiB "
               f"(ru_maxrss {v['ru_maxrss_mib']:.0f}, inherited)")
    print(table(["what", "size", "seconds", "rate"], rows))
    print(f"load average at the end {load_average()}")


if __name__ == "__main__":
    main()
