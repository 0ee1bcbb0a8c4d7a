"""Rename-heavy load: how long until the index equals PostgreSQL, against the ideal.

Run: ``python bench/bench_rename_load.py`` (starts its own PostgreSQL and search
server: real Elasticsearch, or noida-db with ``PATHKEEPER_SEARCH=noida``; ``ES_URL``
points it at a running cluster instead). ``--help`` for sizes.

The workload (issue 11, the comparison with PGSync): one namespace of 20,011
nodes, ``/big`` (10 directories of 1,000 files: 10,011 nodes) and 100 directories
``/sK`` of 99 nodes each (``/sK/d0`` with 98 files). ``--clients`` client threads
(one shared ``Coordinator``) rename for ``--seconds`` as fast as they can (or, with
``--rate``, at that many renames per second in all: the issue's workload was about 224/s,
3,800 file and 680 directory renames in 20 s; the write path is faster now): a random
directory (any of the 211, ``/big`` included) with probability ``--dir-share``,
else a random file, by node id, to a fresh name. The indexer worker runs as its own
process (``python -m pathkeeper indexer run``, default options) and is already caught up when
the load starts.

Measured, in one run, against the same server:

* **raw bulk rate**: ``streaming_bulk`` overwriting the same 20,011 documents (the
  indexer's exact shape, a higher external version, new paths) in a fresh index:
  ``--raw-rounds`` rounds before the load and one after; the median is the ceiling.
* **must rewrite**: what the workload asks the index to rewrite if every change is
  applied on its own: 1 document per file rename, the whole subtree (directory
  included) per directory rename. Renames never change the tree's shape, so
  subtree sizes are known up front.
* **ideal** = max(load duration, must rewrite / raw bulk rate).
* **busy**: from the start of the load until every partition's checkpoint passed
  the last event (``wait_indexed``); the index is then compared with PostgreSQL
  document by document (missing / extra / wrong), outside the timing.
* **file rename lag**: for every ``--poll-sample``-th file rename during the load, from
  the moment ``rename`` returned to the moment a realtime multi-get (every ``--poll-ms``)
  shows the document at a ``seq`` at least the rename's: p50, p99, max. The poller
  watches the document from before the rename is sent, so its observations do not wait
  for the clients' process to tell it the rename returned. The poller runs in a
  process and a session of its own (``--poller``), and so does the worker
  (``--worker-session``): with the kernel's autogroup scheduling, CPU is shared fairly
  between sessions, and either one left in the clients' session competes with the 4
  client threads for that session's share.
* **the same lag, step by step**: each rename placed, by its ``seq``, on the node-lane
  batch that carried it, from the wall-clock stamps of the worker's ``batch_applied``
  line: rename returned -> the worker began the read -> read done -> bulk request sent
  -> acknowledged -> the poller saw it. "Rename returned -> acknowledged" is the lag a
  poller with no delay of its own would measure (a realtime get sees a write once it is
  acknowledged); ``--poller none`` measures only that, without the poller's requests.
* **who had the CPU**: CPU seconds of the bench process (clients), the worker, the
  poller, PostgreSQL and the search server (each a process tree) during the load, and the
  machine's total (others = the machine's busy time less ours); and the index's
  refreshes during the load.

Goal (issue 11): busy <= 1.25 x ideal, p99 file rename lag <= 250 ms, 0 missing,
0 extra, 0 wrong. The machine is shared (2 vCPUs, other sessions' test suites):
read ratios from one run, printed with the load average.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import multiprocessing
import os
import queue
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import (
    load_average,
    median,
    migrated_cluster,
    now_utc,
    percentile,
    postmaster_pid,
    process_stats,
    table,
)
from plots import PLOTS_DIR, lag_distributions, read_results, write_results
from sqlalchemy import text

from coordinator import Coordinator, CoordinatorError, Node
from coordinator.indexing import consumer_for
from indexer import elasticsearch_index
from indexer.contract import comparable, expected_document, index_action, is_indexed
from indexer.index_scan import stream_index_docs
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from pathkeeper.local.bulk_tree import bulk_subtree
from pathkeeper.local.search import new_local_search, search_kind
from pathkeeper.local.worker_process import WorkerProcess

NS = "load"
#: The alias of this run: its own (the search server may be shared, and a run that
#: found an earlier run's documents under a fixed alias counted them as extra), and
#: dropped at the end. Handed to the poller process, which would make its own.
ALIAS = f"bench-rename-load-{os.getpid()}"


#: Elasticsearch measures a request's ``took`` on a clock it reads every
#: ``thread_pool.estimated_time_interval`` (200 ms by default), so a node-lane request's
#: ``took`` comes in steps of 200 ms (mostly 0) whatever it really took. The node this
#: bench starts reads the clock each time, so the step "of which the server's took"
#: splits a request's time between the node and the way there and back. A node given by
#: ``ES_URL`` keeps its own setting (the report says so).
PRECISE_TOOK = {"thread_pool.estimated_time_interval": "0"}


@contextmanager
def search_server() -> Iterator[tuple[str, int | None]]:
    """The server's URL and, when we started it, its process id (for CPU accounting)."""
    if os.environ.get("ES_URL"):
        yield os.environ["ES_URL"], None
        return
    with new_local_search(settings=PRECISE_TOOK) as server:
        yield server.url, server.pid


def last_position(coord: Coordinator) -> int:
    with coord.engine.connect() as conn:
        return int(conn.execute(text("SELECT coalesce(max(position), 0) FROM events")).scalar_one())


def build_tree(coord: Coordinator) -> None:
    coord.create_namespace(NS)
    bulk_subtree(coord, NS, "/", "big", dirs=10, files_per_dir=1000)
    for k in range(100):
        bulk_subtree(coord, NS, "/", f"s{k}", dirs=1, files_per_dir=98)


def subtree_sizes(nodes: list[Node]) -> dict[str, int]:
    """Nodes in each directory's subtree, itself included."""
    sizes = {n.id: 1 for n in nodes if n.is_dir}
    parent = {n.id: n.parent_id for n in nodes}
    for n in nodes:
        p = n.parent_id
        while p is not None and p in sizes:
            sizes[p] += 1
            p = parent.get(p)
    return {d: s for d, s in sizes.items() if parent.get(d) is not None}  # not the root


def raw_overwrite_rate(es: SearchEngine, nodes: list[Node], round_: int) -> float:
    """docs/s of streaming_bulk overwriting ``nodes``' documents (loaded first, not timed)
    with new paths at a higher external version, in a fresh index."""
    index = f"bench-raw-overwrite-{os.getpid()}-{round_}"
    elasticsearch_index.create_index(es, index)
    docs = [n for n in nodes if is_indexed(n)]
    try:
        for version, prefix in ((1, ""), (2, "/raw")):
            actions = (
                index_action(index, replace(n, path=prefix + n.path), version)
                for n in docs
            )
            start = time.perf_counter()
            done = sum(1 for ok, _ in es.streaming_bulk(
                actions, chunk_size=1000, max_chunk_bytes=100 * 2**20, max_retries=0,
                initial_backoff=2, max_backoff=600) if ok)
            elapsed = time.perf_counter() - start
            assert done == len(docs), f"only {done} of {len(docs)} accepted"
        return len(docs) / elapsed
    finally:
        es.delete_index(index)


class Load:
    """The clients and the rename bookkeeping; the lag poller (``poll_loop``) runs in a
    process of its own by default (``--poller thread``: a thread of this process, as
    the bench did before: it then shares the GIL with the 4 client threads)."""

    def __init__(self, coord: Coordinator, nodes: list[Node], dir_share: float,
                 inbox: Any, sample: int, interval: float = 0.0) -> None:
        self.coord = coord
        self.interval = interval  # each client's pause between renames' starts (0: none)
        self.dirs = [n.id for n in nodes if n.is_dir and n.parent_id is not None]
        self.files = [n.id for n in nodes if not n.is_dir]
        self.dir_share = dir_share
        self.inbox = inbox
        self.sample = sample
        self.dir_renames: list[str] = []
        self.file_renames = 0
        self.file_attempts = 0
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()

    def client(self, k: int, stop_at: float) -> None:
        rng = random.Random(k)
        i = 0
        next_at = time.perf_counter()
        while time.perf_counter() < stop_at:
            i += 1
            if self.interval:
                next_at += self.interval  # on schedule: a late rename does not shift the rest
                time.sleep(max(0.0, next_at - time.perf_counter()))
            is_dir = rng.random() < self.dir_share
            node_id = rng.choice(self.dirs if is_dir else self.files)
            watch = None
            if not is_dir:
                with self.lock:
                    self.file_attempts += 1
                    if self.file_attempts % self.sample == 0:
                        # Watched from before the rename: the poller's observations of
                        # the document do not wait for this (starved) process to tell
                        # it the rename returned.
                        watch = self.file_attempts
                        self.inbox.put(("watch", watch, node_id))
            try:
                r = self.coord.rename(NS, node_id, f"n{k}-{i}-{rng.randrange(10**6)}")
            except CoordinatorError as exc:  # a lock wait that timed out, say
                with self.lock:
                    name = type(exc).__name__
                    self.errors[name] = self.errors.get(name, 0) + 1
                    if watch is not None:
                        self.inbox.put(("cancel", watch))
                continue
            done = time.time()  # wall clock: compared with the worker's and the poller's
            assert r.seq is not None
            with self.lock:
                if is_dir:
                    self.dir_renames.append(node_id)
                else:
                    self.file_renames += 1
                    if watch is not None:
                        self.inbox.put(("returned", watch, node_id, r.seq, done))


class PipeInbox:
    """The poller process's inbox: ``put`` sends at once, from the calling thread (a
    ``multiprocessing.Queue`` hands items to a feeder thread, which in the clients'
    starved process told the poller of a rename 1.9 s late at p50); the poller's end
    (``reader``) is read with ``get_from``."""

    def __init__(self, ctx: Any) -> None:
        self.reader, self.writer = ctx.Pipe(duplex=False)
        self.lock = threading.Lock()

    def put(self, item: Any) -> None:
        with self.lock:
            self.writer.send(item)


def get_from(inbox: Any) -> Any:
    """The next item of a ``queue.Queue`` or of a ``PipeInbox``'s reader; ``queue.Empty``."""
    if isinstance(inbox, queue.Queue):
        return inbox.get_nowait()
    if inbox.poll():
        return inbox.recv()
    raise queue.Empty


def poll_loop(es_url: str, alias: str, inbox: Any, outbox: Any, poll: float, ready: Any
              ) -> None:
    """The lag poller: one realtime multi-get of every watched file, every ``poll``
    seconds. ``inbox`` brings ``("watch", token, node_id)`` before a sampled rename,
    then ``("returned", token, node_id, seq, returned_at)`` or ``("cancel", token)``,
    and at the end "done" (finish once every returned rename was seen) or "stop".
    A watched document's observations are kept from the watch on, so the time it first
    showed a ``seq`` at least the rename's does not depend on when the clients' process
    got round to telling this one that the rename returned (on a saturated box that
    was up to ~100-450 ms late at p99). ``outbox`` gets one ``(seen, round_trips,
    never_seen)``, each seen rename as ``(node_id, seq, returned_at, sent, answered,
    told)``: the multi-get that first showed it sent and answered, and when this
    process learned the rename returned; wall-clock seconds. ``ready`` is set once it
    answers (a spawned process takes seconds to import on a loaded box)."""
    if multiprocessing.parent_process() is not None:
        os.setsid()  # a session of its own: see ``WorkerProcess(own_session=True)``
    es = open_search(es_url, request_timeout=600)
    es.cluster_settings("*.cluster.name")  # answers once the server is up
    ready.set()
    watched: dict[int, str] = {}  # token -> node id
    # token -> each new seq the document showed: (seq, multi-get sent, answered)
    shown: dict[int, list[tuple[int, float, float]]] = {}
    returned: dict[int, tuple[str, int, float, float]] = {}  # token -> rename, told at
    seen: list[tuple[str, int, float, float, float, float]] = []
    trips: list[float] = []
    finishing = False

    def settle(token: int) -> None:
        node_id, seq, done, told = returned[token]
        for got_seq, sent, answered in shown.get(token, []):
            if got_seq >= seq:
                seen.append((node_id, seq, done, sent, answered, told))
                del returned[token], watched[token]
                shown.pop(token, None)
                return

    while True:
        while True:
            try:
                item = get_from(inbox)
            except queue.Empty:
                break
            if item == "stop":
                outbox.put((seen, trips, len(returned)))
                return
            if item == "done":
                finishing = True
            elif item[0] == "watch":
                watched[item[1]] = item[2]
            elif item[0] == "cancel":
                watched.pop(item[1], None)
                shown.pop(item[1], None)
            else:
                _, token, node_id, seq, done = item
                returned[token] = (node_id, seq, done, time.time())
                settle(token)
        if finishing and not returned:
            outbox.put((seen, trips, 0))
            return
        if watched:
            wanted = list(watched.items())
            sent = time.time()
            got = es.mget(index=alias, realtime=True, source_includes=["seq"],
                          docs=[{"_id": i, "routing": NS} for _, i in wanted])
            now = time.time()
            trips.append(now - sent)
            for (token, _), doc in zip(wanted, got["docs"], strict=True):
                if not doc.get("found"):
                    continue
                seq = int(doc["_source"]["seq"])
                history = shown.setdefault(token, [])
                if not history or seq > history[-1][0]:
                    history.append((seq, sent, now))
                if token in returned:
                    settle(token)
        time.sleep(poll)


class CpuMeter:
    """CPU seconds of each of the bench's processes (a process tree each) and of the
    whole machine, between ``start`` and ``stop``: who had the 2 cores."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, roots: dict[str, tuple[int, bool]]) -> None:
        self.roots = roots  # name -> (pid, with its descendants)
        self.first: dict[str, float] = {}
        self.used: dict[str, float] = {}

    @staticmethod
    def _stats() -> dict[int, tuple[int, float]]:
        return {pid: (int(f[1]), (int(f[11]) + int(f[12])) / CpuMeter.TICK)
                for pid, f in process_stats().items()}

    @staticmethod
    def _machine() -> tuple[float, float]:
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        busy = sum(cpu[:3]) + sum(cpu[5:8])  # user nice system irq softirq steal
        return busy / CpuMeter.TICK, (cpu[3] + cpu[4]) / CpuMeter.TICK

    def _sample(self) -> dict[str, float]:
        stats = self._stats()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        out: dict[str, float] = {}
        for name, (root, tree) in self.roots.items():
            todo, total = [root], 0.0
            while todo:
                pid = todo.pop()
                if pid in stats:
                    total += stats[pid][1]
                    if tree:
                        todo += children.get(pid, [])
            out[name] = total
        out["machine busy"], out["machine idle"] = self._machine()
        return out

    def start(self) -> None:
        self.first = self._sample()
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        last = self._sample()
        self.seconds = time.perf_counter() - self.t0
        self.used = {k: last[k] - self.first.get(k, 0.0) for k in last}

    def rows(self) -> list[list[str]]:
        ours = sum(v for k, v in self.used.items() if not k.startswith("machine"))
        used = {**self.used, "others (machine busy - ours)": self.used["machine busy"] - ours}
        return [[f"CPU {k}, cores", f"{v / self.seconds:.2f}"] for k, v in used.items()]


def refresh_counts(es: SearchEngine) -> dict[str, int]:
    """Refreshes of our index so far (Elasticsearch counts external ones apart: a realtime
    get of a document written since the last refresh forces an internal one)."""
    try:
        got = es.index_stats(ALIAS)["_all"]["primaries"]["refresh"]
    except Exception:  # a stand-in without these statistics
        return {"total": 0, "external": 0}
    return {"total": int(got.get("total", 0)), "external": int(got.get("external_total", 0))}


#: The steps of a file rename's lag, in order (``decompose``); "=" rows are sums.
STEPS = [
    "rename returned -> NOTIFY heard by the worker",
    "NOTIFY heard -> read began (wake-up)",
    "read: gap-safe bound (steps 1-3)",
    "read: select of the events",
    "node fetch (snapshot of the named nodes)",
    "fetched -> request sent (plan, hand-over)",
    "request sent -> acknowledged (bulk)",
    "  of which the server's took",
    "= rename returned -> worker began the read that got it",
    "= rename returned -> acknowledged",
    "acknowledged -> poller's multi-get answered",
    "= rename returned -> poller saw it (the lag)",
]


def decompose(log_path: Path, seen: list[tuple[str, int, float, float, float, float]]
              ) -> tuple[list[list[str]], list[float], dict[str, list[float]]]:
    """Each seen file rename placed on its node-lane batch's timeline (the worker's
    ``batch_applied`` stamps): rename returned -> the worker heard the NOTIFY -> read
    began -> bound found -> events read -> nodes fetched -> request sent ->
    acknowledged -> the poller's multi-get answered. Rows of p50 / p90 / p99 / mean of
    each step (``STEPS``), and the mean of each step over the slowest 1 % of renames;
    also the lags to the acknowledgement (what a poller with no delay would see), and
    each step's samples in seconds. A read that no notification started (the poll, or
    another runner's wake-up) or a worker that logs no ``notified_at`` leaves the first
    two steps out for that rename."""
    batches = []
    for line in log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "batch_applied" and rec.get("acked_at"):
            batches.append(rec)
    batches.sort(key=lambda r: r["cursor"])
    cursors = [b["cursor"] for b in batches]
    nan = float("nan")
    steps: list[tuple[float, ...]] = []
    for _node, seq, done, _sent, now, _arrived in seen:
        i = bisect.bisect_left(cursors, seq)
        if i == len(batches) or batches[i]["after"] >= seq:
            continue
        b = batches[i]
        read_done = b["read_at"] + b["read_seconds"]
        bound = b.get("bound_seconds", nan)
        fetched = read_done + b["nodes_seconds"]
        heard = b.get("notified_at") or nan
        if not done <= heard <= b["read_at"]:
            heard = nan  # that read was not started by this rename's notification
        steps.append((heard - done, b["read_at"] - heard, bound, b["read_seconds"] - bound,
                      b["nodes_seconds"], b["sent_at"] - fetched, b["acked_at"] - b["sent_at"],
                      b.get("es_took_seconds", nan),
                      b["read_at"] - done, b["acked_at"] - done,
                      now - b["acked_at"], now - done))
    acked = [t[9] for t in steps]
    columns = {name: [t[k] for t in steps if not math.isnan(t[k])]
               for k, name in enumerate(STEPS)}
    if not steps:
        return [], acked, columns
    by = 11 if not math.isnan(steps[0][11]) else 9
    slow = sorted(steps, key=lambda t: t[by])[-max(1, len(steps) // 100):]
    rows = []
    for k, name in enumerate(STEPS):
        col = columns[name]
        if not col:
            continue
        slow_col = [t[k] for t in slow if not math.isnan(t[k])]
        rows.append([name, *(f"{percentile(col, q) * 1000:.1f}" for q in (0.5, 0.9, 0.99)),
                     f"{sum(col) / len(col) * 1000:.1f}",
                     f"{sum(slow_col) / len(slow_col) * 1000:.1f}" if slow_col else "-"])
    return rows, acked, columns


def compare(coord: Coordinator, es: SearchEngine) -> tuple[int, int, int, int]:
    """(documents expected, missing, extra, wrong): the index against PostgreSQL."""
    want = {n.id: expected_document(n) for n in coord.walk(NS) if is_indexed(n)}
    es.refresh(ALIAS)
    got = {d["node_id"]: comparable(d) for d in stream_index_docs(es, ALIAS, NS)}
    missing = len(set(want) - set(got))
    extra = len(set(got) - set(want))
    wrong = sum(1 for k in set(want) & set(got) if want[k] != got[k])
    return len(want), missing, extra, wrong


def worker_totals(log_path: Path) -> dict[str, float]:
    """Sums over the worker's JSON log: node-lane batches, subtree-lane passes,
    documents written / answered 409."""
    out: dict[str, float] = {"batches": 0, "subtree_passes": 0, "merged_batches": 0,
                             "indexed": 0, "already_newer": 0, "deleted": 0}
    for line in log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        event = rec.get("event")
        if event == "batch_applied":
            out["batches"] += 1
        elif event == "subtrees_applied":
            out["subtree_passes"] += 1
            out["merged_batches"] += rec.get("batches", 0)
        else:
            continue
        for key in ("indexed", "already_newer", "deleted"):
            out[key] += rec.get(key, 0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="renames per second of all clients together (0: as fast as "
                        "they can)")
    parser.add_argument("--dir-share", type=float, default=0.15,
                        help="share of renames that rename a directory")
    parser.add_argument("--raw-rounds", type=int, default=2, help="raw rounds before the load")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up catching up")
    parser.add_argument("--poll-ms", type=float, default=5.0,
                        help="interval of the realtime multi-get that detects renames")
    parser.add_argument("--poll-sample", type=int, default=4,
                        help="follow every N-th file rename: the poller's realtime multi-gets "
                             "cost the server in proportion to the renames they follow, and "
                             "following all of them their round trip reached seconds under load")
    parser.add_argument("--poller", choices=["process", "thread", "none"], default="process",
                        help="run the lag poller in a process of its own (default), in a "
                             "thread beside the clients (sharing their GIL), or not at all "
                             "(lags then only to the worker's acknowledged requests)")
    parser.add_argument("--worker-session", choices=["own", "shared"], default="own",
                        help="start the worker in a session of its own (default, as a "
                             "service manager would) or in the clients' (it then shares their "
                             "CPU share under the kernel's autogroup scheduling)")
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the worker's JSON log here")
    parser.add_argument("--results", type=Path, default=None,
                        help="write this run's results (lags, steps, ratios) as JSON here")
    parser.add_argument("--label", default="after",
                        help="this run's series in the plot (runs of one label are pooled)")
    parser.add_argument("--before", type=Path, nargs="*", default=[],
                        help="results files of other runs (earlier code, or the same code) "
                             "drawn in the same plot, pooled by their labels")
    parser.add_argument("--plot", choices=["lone", "load"], default=None,
                        help="draw the lag distributions to bench/plots/: lone_rename_lag.png "
                             "(goals p50 10 / p99 25 ms) or rename_load_lag.png (goal p99 150)")
    parser.add_argument("--draw-only", action="store_true",
                        help="no run: draw --plot from the --before files alone")
    args = parser.parse_args()
    if args.draw_only:
        if args.plot is None or not args.before:
            parser.error("--draw-only needs --plot and --before files")
        draw(args.plot, [read_results(p) for p in args.before])
        return
    server_kind = "ES_URL" if os.environ.get("ES_URL") else search_kind()
    print(f"bench_rename_load {now_utc()}  server: {server_kind}  poller: {args.poller}  "
          f"worker session: {args.worker_session}  poll sample: 1 in {args.poll_sample}  "
          f"load before: {load_average()}")
    with migrated_cluster("bench_rename") as (pg, database_url), \
            search_server() as (es_url, es_pid), tempfile.TemporaryDirectory() as tmp:
        es = open_search(es_url, request_timeout=600)
        coord = Coordinator.connect(database_url, pool_size=args.clients + 2)
        build_tree(coord)
        nodes = list(coord.walk(NS))
        sizes = subtree_sizes(nodes)
        raw = [raw_overwrite_rate(es, nodes, r) for r in range(args.raw_rounds)]
        print(f"tree: {len(nodes) - 1:,} nodes, {len(sizes)} directories; "
              f"raw before: {', '.join(f'{x:,.0f}' for x in raw)} docs/s", flush=True)

        log_path = Path(tmp) / "worker.log"
        worker = WorkerProcess(database_url, es_url, ALIAS, log_path,
                               own_session=args.worker_session == "own")
        worker.start()
        poller: Any = None
        try:
            consumer = consumer_for(ALIAS)
            assert coord.wait_indexed(last_position(coord), 300, consumer=consumer), \
                "the worker did not index the tree"
            before = worker_totals(log_path)
            poll_args = (args.poll_ms / 1000,)
            # A pipe and multiprocessing's queue and event, or their threading kinds.
            inbox: Any
            outbox: Any
            ready: Any
            if args.poller == "process":
                ctx = multiprocessing.get_context("spawn")
                inbox, outbox, ready = PipeInbox(ctx), ctx.Queue(), ctx.Event()
                poller = ctx.Process(target=poll_loop,
                                     args=(es_url, ALIAS, inbox.reader, outbox, *poll_args,
                                           ready),
                                     daemon=True)
            else:
                inbox, outbox, ready = queue.Queue(), queue.Queue(), threading.Event()
                poller = threading.Thread(target=poll_loop,
                                          args=(es_url, ALIAS, inbox, outbox, *poll_args, ready),
                                          daemon=True)
            if args.poller != "none":
                poller.start()
                assert ready.wait(120), "the lag poller did not start"
            assert worker.proc is not None
            roots = {"bench process (clients" + (", poller)" if args.poller == "thread" else ")"):
                     (os.getpid(), False), "worker": (worker.proc.pid, False),
                     "postgresql": (postmaster_pid(pg.data_dir), True)}
            if args.poller == "process":
                roots["poller process"] = (poller.pid, False)
            refreshes_before = refresh_counts(es)
            if es_pid is not None:
                roots[server_kind] = (es_pid, True)
            cpu = CpuMeter(roots)
            load = Load(coord, nodes, args.dir_share, inbox, args.poll_sample,
                        args.clients / args.rate if args.rate else 0.0)
            load_before = load_average()
            start = time.perf_counter()
            stop_at = start + args.seconds
            clients = [threading.Thread(target=load.client, args=(k, stop_at))
                       for k in range(args.clients)]
            cpu.start()
            for t in clients:
                t.start()
            for t in clients:
                t.join()
            load_s = time.perf_counter() - start
            cpu.stop()
            refreshes = {k: v - refreshes_before[k] for k, v in refresh_counts(es).items()}
            inbox.put("done")
            load_during = load_average()
            final = last_position(coord)
            caught = coord.wait_indexed(final, args.timeout, consumer=consumer)
            busy_s = time.perf_counter() - start
            if args.poller == "none":
                seen, round_trips, never_seen = [], [], 0
                while True:
                    try:
                        item = inbox.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(item, tuple) and item[0] == "returned":
                        nan = float("nan")  # not seen: placed by the worker's stamps
                        seen.append((item[2], item[3], item[4], nan, nan, nan))
            else:
                try:
                    seen, round_trips, never_seen = outbox.get(timeout=60)
                except queue.Empty:
                    inbox.put("stop")
                    seen, round_trips, never_seen = outbox.get(timeout=30)
                poller.join(10)
            after = worker_totals(log_path)
            assert worker.terminate() == 0
            if args.keep_log is not None:
                args.keep_log.write_bytes(log_path.read_bytes())
            steps, acked, columns = decompose(log_path, seen)
        finally:
            worker.ensure_dead()
            if isinstance(poller, multiprocessing.process.BaseProcess) and poller.is_alive():
                poller.kill()
        expected, missing, extra, wrong = compare(coord, es)
        elasticsearch_index.drop_alias_and_indices(es, ALIAS)
        raw.append(raw_overwrite_rate(es, nodes, len(raw)))
        es.close()
        coord.close()

    lags = [now - done for _, _, done, _, now, _ in seen if not math.isnan(now)]
    lags_sent = [max(0.0, sent - done) for _, _, done, sent, _, _ in seen if not math.isnan(sent)]
    told = [arrived - done for _, _, done, _, _, arrived in seen if not math.isnan(arrived)]
    raw_m = median(raw)
    must = load.file_renames + sum(sizes[d] for d in load.dir_renames)
    ideal = max(load_s, must / raw_m)
    done = {k: after[k] - before[k] for k in after}

    def ms(values: list[float]) -> str:
        return " / ".join(f"{percentile(values, q) * 1000:.0f}" for q in (0.5, 0.99))

    print()
    print(f"load: {args.clients} clients, {load_s:.1f} s: {load.file_renames:,} file renames, "
          f"{len(load.dir_renames):,} directory renames "
          f"({sum(1 for d in load.dir_renames if sizes[d] > 5000)} of /big), "
          f"errors {load.errors or 0}")
    print(f"load average: before {load_before}, end of load {load_during}, "
          f"after {load_average()}")
    print(table(
        ["measure", "value"],
        [
            ["raw bulk overwrite, docs/s (median)",
             f"{raw_m:,.0f} ({', '.join(f'{x:,.0f}' for x in raw)})"],
            ["documents the workload must rewrite", f"{must:,}"],
            ["ideal = max(load, must / raw), s", f"{ideal:.1f}"],
            ["busy: load start to caught up, s",
             f"{busy_s:.1f}" + ("" if caught else " (NOT caught up: timeout)")],
            ["catch-up after the load, s", f"{busy_s - load_s:.1f}"],
            ["busy / ideal", f"{busy_s / ideal:.2f}"],
            ["file rename lag p50 / p99 / max, ms",
             f"{ms(lags)} / {max(lags, default=float('nan')) * 1000:.0f} ({len(lags):,} samples,"
             f" {never_seen} never seen)"],
            ["same, to the multi-get's sending (lower bound), ms", ms(lags_sent)],
            ["same, to the worker's bulk acknowledged (no poller), ms", ms(acked)],
            ["lag poller's multi-get round trip p50 / p99, ms", ms(round_trips)],
            ["rename returned -> the poller was told of it p50 / p99, ms", ms(told)],
            ["index vs PostgreSQL: docs / missing / extra / wrong",
             f"{expected:,} / {missing} / {extra} / {wrong}"],
            ["worker: node-lane batches, subtree passes (batches merged)",
             f"{done['batches']:,.0f}, {done['subtree_passes']:,.0f} "
             f"({done['merged_batches']:,.0f})"],
            ["worker: documents written / answered 409",
             f"{done['indexed']:,.0f} / {done['already_newer']:,.0f}"],
            ["search server refreshes during the load: all / external (scheduled "
             "or asked for; the rest are internal, e.g. for realtime gets)",
             f"{refreshes['total']:,} / {refreshes['external']:,}"],
            *cpu.rows(),
        ],
    ))
    print()
    print("file rename lag, step by step (ms; the node-lane batch that carried each rename):")
    if server_kind == "ES_URL":
        print("(the server's took as the node given by ES_URL counts it: in steps of 200 ms "
              "unless its thread_pool.estimated_time_interval is 0)")
    print(table(["step", "p50", "p90", "p99", "mean", "mean, slowest 1 %"], steps))
    results = {
        "bench": "bench_rename_load", "at": now_utc(), "label": args.label,
        "server": server_kind, "rate": args.rate, "clients": args.clients,
        "seconds": args.seconds, "dir_share": args.dir_share,
        "load_average": {"before": load_before, "end_of_load": load_during,
                         "after": load_average()},
        "lag_ms": [x * 1000 for x in lags], "lag_to_ack_ms": [x * 1000 for x in acked],
        "steps_ms": {k: [x * 1000 for x in v] for k, v in columns.items()},
        "busy_s": busy_s, "ideal_s": ideal, "busy_over_ideal": busy_s / ideal,
        "raw_docs_per_s": raw, "file_renames": load.file_renames,
        "dir_renames": len(load.dir_renames),
        "index_vs_postgresql": {"documents": expected, "missing": missing, "extra": extra,
                                "wrong": wrong},
    }
    if args.results is not None:
        write_results(args.results, results)
    if args.plot is not None:
        draw(args.plot, [results, *(read_results(p) for p in args.before)])


def draw(kind: str, runs: list[dict[str, Any]]) -> None:
    """The lag distributions of ``runs``, pooled by label, to bench/plots/."""
    series: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for run in runs:
        series.setdefault(run["label"], []).extend(run["lag_ms"])
        counts[run["label"]] = counts.get(run["label"], 0) + 1
    named = {f"{label}, {counts[label]} run{'s' if counts[label] > 1 else ''}": xs
             for label, xs in series.items()}
    rate = runs[0]["rate"]
    if kind == "lone":
        path = lag_distributions(
            named, PLOTS_DIR / "lone_rename_lag.png",
            title=f"lone file rename, commit returned -> realtime GET sees it, {rate:g}/s",
            goals_ms={"goal p50 10 ms": 10, "goal p99 25 ms": 25})
    else:
        path = lag_distributions(
            named, PLOTS_DIR / "rename_load_lag.png",
            title=f"file rename lag under the rename-heavy load ({rate:g} renames/s)",
            goals_ms={"goal p99 150 ms": 150})
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
