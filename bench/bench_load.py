"""Load benchmark: a sustained mixed workload with the indexer worker running.

Run: ``python bench/bench_load.py`` (60 s by default; ``--seconds 180`` for the figures
in RELIABILITY.md; starts its own PostgreSQL and local search node, see
``pathkeeper.local.search``, or uses ``ES_URL``).

* ``--clients`` (16) client **processes** (``spawn``, one ``Coordinator`` each, so no
  shared GIL), spread over ``--namespaces`` (8) namespaces. Each owns a directory
  ``/cK`` with four subdirectories and runs a mix: create file 25 %, write file 25 %,
  rename file 10 %, move file to another subdirectory 10 %, delete file 8 %, rename one
  of its subdirectories (a subtree rename: every descendant's path changes in
  Elasticsearch) 4 %, create/rename in a directory shared by every client of the
  namespace (contention) 8 %, stat 5 %, listdir 5 %. ``--dir-renames 0`` gives the
  subdirectory renames' 4 % to the shared directory instead (each directory rename
  ends a worker batch and costs a sweep: see RELIABILITY.md, "Load").
* The indexer worker runs as its own process (``python -m pathkeeper indexer run``), so that its
  memory can be read from ``/proc``.
* Sampled every ``--sample`` seconds: indexer lag (events committed after the
  checkpoints, and the age of the oldest such event: ``indexer.status``) and the
  worker's RSS.

Printed: per operation type, count, rate, p50/p99/max latency and errors; lag
percentiles; the worker's RSS over time (mean of the first and last thirds of the
samples); time to catch up after the clients stop, and a count check of the index
against PostgreSQL. Nothing is asserted: numbers only.

The machine is shared (2 vCPUs, other sessions running test suites): every figure is
printed with the load average around it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import ROOT, load_average, migrated_cluster, now_utc, percentile, table
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.errors import CoordinatorError
from coordinator.indexing import consumer_for
from indexer import status
from indexer.elasticsearch_index import drop_alias_and_indices
from indexer.search_client import open_search
from pathkeeper.local.search import new_local_search

ALIAS = "bench-load"
SUBDIRS = 4


def client_main(
    url: str, ns: str, k: int, go: Any, seconds: float, out: Any, seed: int,
    dir_renames: float = 0.04,
) -> None:
    """One client process: the mixed workload for ``seconds`` after ``go`` is set; puts
    ``(latencies by op, errors by op and type)`` on ``out``."""
    rng = random.Random(seed)
    lat: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    with Coordinator.connect(url, pool_size=1, max_overflow=1, lock_timeout=2.0) as coord:
        base = f"/c{k}"
        dirs = [f"d{i}" for i in range(SUBDIRS)]  # current names of the subdirectories
        for d in dirs:
            coord.mkdir(ns, f"{base}/{d}", parents=True)
        coord.mkdir(ns, "/shared", parents=True)
        files: list[tuple[int, str]] = []  # (subdirectory index, file name)
        serial = 0
        out.put(("ready", k))
        go.wait()
        stop_at = time.monotonic() + seconds

        def path(f: tuple[int, str]) -> str:
            return f"{base}/{dirs[f[0]]}/{f[1]}"

        while time.monotonic() < stop_at:
            r = rng.random()
            t0 = time.perf_counter()
            op = "?"
            try:
                if r < 0.25 or not files:
                    op = "create_file"
                    serial += 1
                    f = (rng.randrange(SUBDIRS), f"f{serial}")
                    coord.create_file(ns, path(f), f"body {serial} " * 8, {"k": serial % 7})
                    files.append(f)
                elif r < 0.50:
                    op = "write_file"
                    coord.write_file(ns, path(rng.choice(files)), f"new {rng.random()}")
                elif r < 0.60:
                    op = "rename_file"
                    i = rng.randrange(len(files))
                    serial += 1
                    coord.rename(ns, path(files[i]), f"r{serial}")
                    files[i] = (files[i][0], f"r{serial}")
                elif r < 0.70:
                    op = "move_file"
                    i = rng.randrange(len(files))
                    target = (rng.randrange(SUBDIRS), files[i][1])
                    if target[0] != files[i][0]:
                        coord.move(ns, path(files[i]), path(target))
                        files[i] = target
                elif r < 0.78:
                    op = "delete_file"
                    coord.delete(ns, path(files.pop(rng.randrange(len(files)))))
                elif r < 0.78 + dir_renames:
                    op = "rename_dir"
                    j = rng.randrange(SUBDIRS)
                    serial += 1
                    coord.rename(ns, f"{base}/{dirs[j]}", f"d{j}x{serial}")
                    dirs[j] = f"d{j}x{serial}"
                elif r < 0.90:
                    op = "shared"  # every client of the namespace: collisions expected
                    name = f"s{rng.randrange(50)}"
                    if rng.random() < 0.5:
                        coord.create_file(ns, f"/shared/{name}", "shared")
                    else:
                        coord.rename(ns, f"/shared/{name}", f"s{rng.randrange(50)}")
                elif r < 0.95:
                    op = "stat"
                    coord.stat(ns, path(rng.choice(files)))
                else:
                    op = "listdir"
                    coord.listdir(ns, f"{base}/{dirs[rng.randrange(SUBDIRS)]}")
                lat.setdefault(op, []).append(time.perf_counter() - t0)
            except CoordinatorError as exc:
                lat.setdefault(op, []).append(time.perf_counter() - t0)
                errors[f"{op}:{type(exc).__name__}"] += 1
    out.put(("done", (lat, dict(errors))))


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def lag(coord: Coordinator, consumer: str) -> tuple[int, float]:
    """(events committed after the checkpoints, age in seconds of the oldest of them)."""
    with coord.engine.connect() as conn:
        parts = status.partitions(conn, consumer)
    return sum(p.lag_events for p in parts), max((p.lag_seconds for p in parts), default=0.0)


def last_position(coord: Coordinator) -> int:
    with coord.engine.connect() as conn:
        return int(conn.execute(text("SELECT coalesce(max(position), 0) FROM events")).scalar_one())


def ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--namespaces", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sample", type=float, default=1.0, help="sampling interval, s")
    parser.add_argument("--dir-renames", type=float, default=0.04,
                        help="share of calls that rename a subdirectory (0 to 0.04; the rest "
                        "of that 4 %% goes to the shared directory)")
    args = parser.parse_args()
    print(f"bench_load {now_utc()}  load before: {load_average()}", flush=True)
    ctx = multiprocessing.get_context("spawn")
    workdir = Path(tempfile.mkdtemp(prefix="bench-load-"))
    own_search = None if os.environ.get("ES_URL") else new_local_search()
    es_url = os.environ.get("ES_URL") or own_search.start()  # type: ignore[union-attr]
    worker: subprocess.Popen[bytes] | None = None
    try:
        with migrated_cluster("bench_load", {"max_connections": "300"}) as (_, url):
            coord = Coordinator.connect(url)
            namespaces = [f"ns{i}" for i in range(args.namespaces)]
            for ns in namespaces:
                coord.create_namespace(ns)
            log_path = workdir / "worker.log"
            with open(log_path, "ab") as log:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "pathkeeper", "indexer", "run", "--database-url", url,
                     "--es-url", es_url, "--alias", ALIAS, "--partitions",
                     str(args.partitions), "--poll-interval", "0.5"],
                    stdout=log, stderr=log, cwd=ROOT,
                )
            consumer = consumer_for(ALIAS)
            while b"worker_started" not in log_path.read_bytes():
                if worker.poll() is not None:
                    raise SystemExit(f"worker exited: {log_path.read_text()[-2000:]}")
                time.sleep(0.1)
            go = ctx.Event()
            out = ctx.Queue()
            procs = [
                ctx.Process(target=client_main, args=(
                    url, namespaces[k % len(namespaces)], k, go, args.seconds, out, k,
                    args.dir_renames))
                for k in range(args.clients)
            ]
            for p in procs:
                p.start()
            for _ in procs:
                kind, _k = out.get(timeout=300)
                assert kind == "ready"
            samples: list[tuple[float, int, float, int | None]] = []
            load_during = []
            go.set()
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                time.sleep(args.sample)  # the sampling period
                events, age = lag(coord, consumer)
                samples.append((time.monotonic() - started, events, age, rss_kb(worker.pid)))
                load_during.append(os.getloadavg()[0])
            results = [out.get(timeout=300) for _ in procs]
            for p in procs:
                p.join(60)
            stopped = time.monotonic()
            target = last_position(coord)
            caught = coord.wait_indexed(target, 600, consumer=consumer)
            catch_up = time.monotonic() - stopped
            rss_end = rss_kb(worker.pid)
            es = open_search(es_url, request_timeout=120)
            es.refresh(ALIAS)
            docs = es.count(ALIAS)
            with coord.engine.connect() as conn:
                nodes = int(conn.execute(
                    text("SELECT count(*) FROM nodes WHERE parent_id IS NOT NULL")).scalar_one())
            drop_alias_and_indices(es, ALIAS)
            es.close()
            worker.terminate()
            worker.wait(60)
            coord.close()
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(30)
        if own_search is not None:
            own_search.close()

    lat: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    for _kind, (lats, errs) in results:
        for op, xs in lats.items():
            lat.setdefault(op, []).extend(xs)
        errors.update(errs)
    total = sum(len(xs) for xs in lat.values())
    rows = []
    for op in sorted(lat, key=lambda o: -len(lat[o])):
        xs = lat[op]
        errs = sum(n for key, n in errors.items() if key.startswith(op + ":"))
        rows.append([op, len(xs), f"{len(xs) / args.seconds:.1f}", ms(percentile(xs, 0.5)),
                     ms(percentile(xs, 0.99)), ms(max(xs)), errs])
    rows.append(["all", total, f"{total / args.seconds:.1f}", ms(percentile(
        [x for xs in lat.values() for x in xs], 0.5)), ms(percentile(
            [x for xs in lat.values() for x in xs], 0.99)), "", sum(errors.values())])
    print()
    print(f"{args.clients} client processes, {args.namespaces} namespaces, "
          f"{args.seconds:.0f} s, {args.dir_renames:.0%} directory renames, worker with "
          f"{args.partitions} partitions; load during: "
          f"mean {statistics.mean(load_during):.1f}, max {max(load_during):.1f}")
    print(table(["operation", "calls", "per s", "p50 ms", "p99 ms", "max ms", "errors"], rows))
    print("errors by type:", dict(errors.most_common()))
    lag_events = [s[1] for s in samples]
    lag_ages = [s[2] for s in samples]
    print()
    print(table(
        ["indexer lag (sampled)", "samples", "p50", "p99", "max"],
        [["events behind", len(samples), percentile(lag_events, 0.5),
          percentile(lag_events, 0.99), max(lag_events)],
         ["seconds behind (oldest)", len(samples), f"{percentile(lag_ages, 0.5):.2f}",
          f"{percentile(lag_ages, 0.99):.2f}", f"{max(lag_ages):.2f}"]],
    ))
    rss = [s[3] for s in samples if s[3] is not None]
    third = max(1, len(rss) // 3)
    first, last = statistics.mean(rss[:third]), statistics.mean(rss[-third:])
    print()
    print(f"worker RSS (MiB): first third mean {first / 1024:.1f}, last third mean "
          f"{last / 1024:.1f} ({(last - first) / first * 100:+.1f} %), min "
          f"{min(rss) / 1024:.1f}, max {max(rss) / 1024:.1f}, after catch-up "
          f"{(rss_end or 0) / 1024:.1f}")
    print("worker RSS timeline (s: MiB):", ", ".join(
        f"{t:.0f}: {r / 1024:.0f}" for t, _, _, r in samples[:: max(1, len(samples) // 12)]
        if r is not None))
    print(f"caught up after the clients stopped: {caught}, in {catch_up:.2f} s; "
          f"index documents {docs}, PostgreSQL non-root nodes {nodes}")
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
