"""Rename-heavy load: how long until the index equals PostgreSQL, against the ideal.

Run: ``python bench/bench_rename_load.py`` (starts its own PostgreSQL and search
server: real Elasticsearch, or noida-db with ``PATHKEEPER_SEARCH=noida``; ``ES_URL``
points it at a running cluster instead). ``--help`` for sizes.

The workload (issue 11, the comparison with PGSync): one namespace of 20,011
nodes, ``/big`` (10 directories of 1,000 files: 10,011 nodes) and 100 directories
``/sK`` of 99 nodes each (``/sK/d0`` with 98 files). ``--clients`` client threads
(one shared ``Coordinator``) rename for ``--seconds`` as fast as they can: a random
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
* **file rename lag**: for every file rename during the load, from the moment
  ``rename`` returned to the moment a realtime multi-get (every ``--poll-ms``) shows the
  document at a ``seq`` at least the rename's: p50, p99, max.

Goal (issue 11): busy <= 1.25 x ideal, p99 file rename lag <= 250 ms, 0 missing,
0 extra, 0 wrong. The machine is shared (2 vCPUs, other sessions' test suites):
read ratios from one run, printed with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import ROOT, load_average, median, migrated_cluster, now_utc, percentile, table

sys.path.insert(0, str(ROOT / "tests" / "indexer"))

from elasticsearch import Elasticsearch
from elasticsearch.helpers import streaming_bulk
from indexer_support import WorkerProcess, bulk_subtree, expected_docs, index_docs
from sqlalchemy import text

from coordinator import Coordinator, CoordinatorError, Node
from coordinator.indexing import consumer_for
from indexer import elasticsearch_index
from indexer.contract import index_action, is_indexed
from pathkeeper.local.search import new_local_search, search_kind

NS = "load"
ALIAS = "bench-rename-load"


@contextmanager
def search_server() -> Iterator[str]:
    if os.environ.get("ES_URL"):
        yield os.environ["ES_URL"]
        return
    with new_local_search() as server:
        yield server.url


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


def raw_overwrite_rate(es: Elasticsearch, nodes: list[Node], round_: int) -> float:
    """docs/s of streaming_bulk overwriting ``nodes``' documents (loaded first, not timed)
    with new paths at a higher external version, in a fresh index."""
    index = f"bench-raw-overwrite-{round_}"
    elasticsearch_index.create_index(es, index)
    docs = [n for n in nodes if is_indexed(n)]
    try:
        for version, prefix in ((1, ""), (2, "/raw")):
            actions = (
                index_action(index, replace(n, path=prefix + n.path), version)
                for n in docs
            )
            start = time.perf_counter()
            done = sum(1 for ok, _ in streaming_bulk(es, actions, chunk_size=1000,
                                                     raise_on_error=False, max_retries=0) if ok)
            elapsed = time.perf_counter() - start
            assert done == len(docs), f"only {done} of {len(docs)} accepted"
        return len(docs) / elapsed
    finally:
        es.indices.delete(index=index)


class Load:
    """The clients, the rename bookkeeping and the lag poller."""

    def __init__(self, coord: Coordinator, es: Elasticsearch, nodes: list[Node],
                 dir_share: float, poll: float) -> None:
        self.coord = coord
        self.es = es
        self.dirs = [n.id for n in nodes if n.is_dir and n.parent_id is not None]
        self.files = [n.id for n in nodes if not n.is_dir]
        self.dir_share = dir_share
        self.poll = poll
        self.dir_renames: list[str] = []
        self.file_renames = 0
        self.errors: dict[str, int] = {}
        self.lags: list[float] = []
        #: The same lags measured to when the multi-get that saw them was sent (a lower
        #: bound: the document became visible between sending and answering), and the
        #: multi-gets' round trips: the resolution of the measurement itself.
        self.lags_sent: list[float] = []
        self.round_trips: list[float] = []
        self.pending: dict[tuple[str, int], float] = {}
        self.lock = threading.Lock()
        self.clients_done = threading.Event()
        self.give_up = threading.Event()

    def client(self, k: int, stop_at: float) -> None:
        rng = random.Random(k)
        i = 0
        while time.perf_counter() < stop_at:
            i += 1
            is_dir = rng.random() < self.dir_share
            node_id = rng.choice(self.dirs if is_dir else self.files)
            try:
                r = self.coord.rename(NS, node_id, f"n{k}-{i}-{rng.randrange(10**6)}")
            except CoordinatorError as exc:  # a lock wait that timed out, say
                with self.lock:
                    name = type(exc).__name__
                    self.errors[name] = self.errors.get(name, 0) + 1
                continue
            done = time.perf_counter()
            assert r.seq is not None
            with self.lock:
                if is_dir:
                    self.dir_renames.append(node_id)
                else:
                    self.file_renames += 1
                    self.pending[(node_id, r.seq)] = done

    def poller(self) -> None:
        # One realtime multi-get for every rename not yet seen, every --poll-ms (a realtime
        # get of a document not yet refreshed costs the server an internal refresh).
        while not (self.clients_done.is_set() and not self.pending) and not self.give_up.is_set():
            with self.lock:
                wanted = list(self.pending.items())
            if wanted:
                sent = time.perf_counter()
                got = self.es.mget(index=ALIAS, realtime=True,
                                   docs=[{"_id": i, "routing": NS} for (i, _), _ in wanted])
                now = time.perf_counter()
                self.round_trips.append(now - sent)
                for ((node_id, seq), committed), doc in zip(wanted, got["docs"], strict=True):
                    if doc.get("found") and int(doc["_source"]["seq"]) >= seq:
                        with self.lock:
                            self.pending.pop((node_id, seq), None)
                        self.lags.append(now - committed)
                        self.lags_sent.append(max(0.0, sent - committed))
            time.sleep(self.poll)


def compare(coord: Coordinator, es: Elasticsearch) -> tuple[int, int, int, int]:
    """(documents expected, missing, extra, wrong): the index against PostgreSQL."""
    want = expected_docs(coord, NS)
    got = {k: {f: v for f, v in d.items() if f != "seq"}
           for k, d in index_docs(es, ALIAS, NS).items()}
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
    parser.add_argument("--dir-share", type=float, default=0.15,
                        help="share of renames that rename a directory")
    parser.add_argument("--raw-rounds", type=int, default=2, help="raw rounds before the load")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up catching up")
    parser.add_argument("--poll-ms", type=float, default=5.0,
                        help="interval of the realtime multi-get that detects renames")
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the worker's JSON log here")
    args = parser.parse_args()
    server_kind = "ES_URL" if os.environ.get("ES_URL") else search_kind()
    print(f"bench_rename_load {now_utc()}  server: {server_kind}  load before: {load_average()}")
    with migrated_cluster("bench_rename") as (_, database_url), search_server() as es_url, \
            tempfile.TemporaryDirectory() as tmp:
        es = Elasticsearch(es_url, request_timeout=600)
        coord = Coordinator.connect(database_url, pool_size=args.clients + 2)
        build_tree(coord)
        nodes = list(coord.walk(NS))
        sizes = subtree_sizes(nodes)
        raw = [raw_overwrite_rate(es, nodes, r) for r in range(args.raw_rounds)]
        print(f"tree: {len(nodes) - 1:,} nodes, {len(sizes)} directories; "
              f"raw before: {', '.join(f'{x:,.0f}' for x in raw)} docs/s", flush=True)

        log_path = Path(tmp) / "worker.log"
        worker = WorkerProcess(database_url, es_url, ALIAS, log_path)
        worker.start()
        try:
            consumer = consumer_for(ALIAS)
            assert coord.wait_indexed(last_position(coord), 300, consumer=consumer), \
                "the worker did not index the tree"
            before = worker_totals(log_path)
            load = Load(coord, es, nodes, args.dir_share, args.poll_ms / 1000)
            load_before = load_average()
            watcher = threading.Thread(target=load.poller, daemon=True)
            start = time.perf_counter()
            stop_at = start + args.seconds
            clients = [threading.Thread(target=load.client, args=(k, stop_at))
                       for k in range(args.clients)]
            watcher.start()
            for t in clients:
                t.start()
            for t in clients:
                t.join()
            load_s = time.perf_counter() - start
            load.clients_done.set()
            load_during = load_average()
            final = last_position(coord)
            caught = coord.wait_indexed(final, args.timeout, consumer=consumer)
            busy_s = time.perf_counter() - start
            watcher.join(60)
            load.give_up.set()
            watcher.join(10)
            after = worker_totals(log_path)
            assert worker.terminate() == 0
            if args.keep_log is not None:
                args.keep_log.write_bytes(log_path.read_bytes())
        finally:
            worker.ensure_dead()
        expected, missing, extra, wrong = compare(coord, es)
        raw.append(raw_overwrite_rate(es, nodes, len(raw)))
        es.close()
        coord.close()

    raw_m = median(raw)
    must = load.file_renames + sum(sizes[d] for d in load.dir_renames)
    ideal = max(load_s, must / raw_m)
    done = {k: after[k] - before[k] for k in after}
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
             f"{percentile(load.lags, 0.5) * 1000:.0f} / {percentile(load.lags, 0.99) * 1000:.0f}"
             f" / {max(load.lags, default=float('nan')) * 1000:.0f} ({len(load.lags):,} samples,"
             f" {len(load.pending)} never seen)"],
            ["same, to the multi-get's sending (lower bound), ms",
             f"{percentile(load.lags_sent, 0.5) * 1000:.0f} / "
             f"{percentile(load.lags_sent, 0.99) * 1000:.0f}"],
            ["lag poller's multi-get round trip p50 / p99, ms",
             f"{percentile(load.round_trips, 0.5) * 1000:.0f} / "
             f"{percentile(load.round_trips, 0.99) * 1000:.0f}"],
            ["index vs PostgreSQL: docs / missing / extra / wrong",
             f"{expected:,} / {missing} / {extra} / {wrong}"],
            ["worker: node-lane batches, subtree passes (batches merged)",
             f"{done['batches']:,.0f}, {done['subtree_passes']:,.0f} "
             f"({done['merged_batches']:,.0f})"],
            ["worker: documents written / answered 409",
             f"{done['indexed']:,.0f} / {done['already_newer']:,.0f}"],
        ],
    ))


if __name__ == "__main__":
    main()
