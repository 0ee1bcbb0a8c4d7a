"""Indexer benchmark: raw bulk rate vs the worker's rates, and commit-to-visible latency.

Run: ``python bench/bench_indexer.py`` (starts its own PostgreSQL and a local
Elasticsearch node, noida-db with ``PATHKEEPER_SEARCH=noida``; ``ES_URL`` points it at
a cluster instead). ``--help`` for sizes.

In one run, against the same search server:

1. **raw create**: the client helpers' ``streaming_bulk`` indexing N documents of
   the indexer's exact shape (``indexer.contract.index_action``) into a fresh
   index: the ceiling for (2). Median of ``--rounds`` rounds.
2. **worker create**: the worker applying N ``created`` events (transactions of
   1,000 nodes, like ``Coordinator.apply`` groups), from start to caught up
   (``wait_indexed``), into a fresh alias each round. Median of rounds.
   **worker import**: the same for an import of N nodes (``Coordinator.import_nodes``
   of a JSON Lines file, one transaction, its missing parents included) in a database
   of its own, so each round's fresh alias applies that import only.
3. **raw overwrite**: streaming_bulk rewriting R existing documents with a new
   path and a higher external version: the ceiling for (4).
4. **worker rename**: a directory with R descendants renamed; the worker's time
   to rewrite every descendant's path (one run).
6. **worker CPU** (``--cpu``, only this part): the process CPU time (user + system,
   ``time.process_time``: not wall time, which the shared machine's load decides) the
   worker spends per indexed document for (a) initial indexing of ``created`` events,
   (b) an import's indexing, (c) a directory rename's descendants; median of
   ``--rounds``, then one more worker run each of (a) and (c) under ``cProfile``
   (every thread the worker starts) and its top 15 functions by own time.
5. **latency**: steady ``--rate`` changes/s (creates and content writes, by 4
   client threads) for ``--seconds``; each change's commit-to-visible time by
   realtime ``GET`` (polled every 2 ms) until the document carries its ``seq``.

The machine is shared (2 vCPUs, other sessions running test suites): read the
ratios, printed with the load average, rather than absolute numbers.

``--results FILE`` writes the figures as JSON (a ``--cpu`` run and a rates run merge into
one file); with ``--before FILE`` (a run of older code) it also draws before against after:
``bench/plots/indexing_vs_raw.png`` (rates / raw, goal 0.8) and
``bench/plots/worker_cpu_per_doc.png``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_import import make_input
from common import load_average, median, migrated_cluster, now_utc, percentile, table
from plots import PLOTS_DIR, ratios_to_ceiling, read_results, write_results

from coordinator import Coordinator, Node
from coordinator.indexing import consumer_for
from coordinator.migrate import upgrade
from indexer import elasticsearch_index
from indexer.contract import index_action
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine, SearchError
from indexer.worker import Worker, WorkerConfig
from pathkeeper.local.bulk_tree import bulk_subtree
from pathkeeper.local.search import new_local_search


@contextmanager
def search_server() -> Iterator[str]:
    if os.environ.get("ES_URL"):
        yield os.environ["ES_URL"]
        return
    with new_local_search() as server:
        yield server.url


@contextmanager
def worker(database_url: str, es_url: str, alias: str,
           on_ready: Callable[[], None] | None = None) -> Iterator[Worker]:
    w = Worker(WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                            partitions=2, poll_interval=1.0))
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    w.ready.wait(60)
    if on_ready is not None:
        on_ready()
    w.listener.listening.wait(60)
    try:
        yield w
    finally:
        w.stop()
        thread.join(120)


def last_position(coord: Coordinator) -> int:
    from sqlalchemy import text

    with coord.engine.connect() as conn:
        return int(conn.execute(text("SELECT max(position) FROM events")).scalar_one())


def fake_nodes(n: int, prefix: str, ids: list[str]) -> Iterator[Node]:
    parent = str(uuid.uuid4())
    for i in range(n):
        yield Node(id=ids[i], namespace="bench", parent_id=parent, name=f"f{i}", kind="file",
                   version=1, path=f"{prefix}/d{i // 1000}/f{i}", content=f"body {i}",
                   metadata={})


def raw_bulk(es: SearchEngine, index: str, n: int, ids: list[str], prefix: str,
             version: int) -> float:
    """docs/s of streaming_bulk for ``n`` documents of the indexer's shape."""
    actions = (index_action(index, node, version) for node in fake_nodes(n, prefix, ids))
    start = time.perf_counter()
    # The helpers' defaults but the chunk: what the client gives a caller that tunes nothing.
    done = sum(1 for ok, _ in es.streaming_bulk(
        actions, chunk_size=1000, max_chunk_bytes=100 * 2**20, max_retries=0,
        initial_backoff=2, max_backoff=600) if ok)
    elapsed = time.perf_counter() - start
    assert done == n, f"only {done} of {n} accepted"
    return n / elapsed


def create_events(coord: Coordinator, ns: str, n: int) -> int:
    """``n`` files (plus their directories) created by ``created`` events, 1,000 per
    transaction; returns the number of nodes."""
    coord.create_namespace(ns)
    total = 0
    for k in range(max(1, n // 1000)):
        _, count = bulk_subtree(coord, ns, "/", f"g{k}", dirs=1, files_per_dir=998)
        total += count
    return total


def import_tree(url: str, n: int) -> tuple[Coordinator, int]:
    """A database of its own holding one import of ``n`` lines (``bench_import``'s
    tree: directories of 99 files, shuffled); the Coordinator on it and the nodes made."""
    upgrade(url)
    coord = Coordinator.connect(url)
    coord.create_namespace("imported")
    with tempfile.TemporaryDirectory(prefix="pathkeeper-bench-") as tmp:
        path = Path(tmp) / "tree.jsonl"
        make_input(path, n)
        with path.open("rb") as f:
            result = coord.import_nodes("imported", f)
    return coord, result.created


def time_worker_to(coord: Coordinator, database_url: str, es_url: str, alias: str,
                   before: Any = None, startups: list[float] | None = None) -> float:
    """Seconds from starting a worker to it having applied the whole log; the part of
    them until it was ready (its index made, its partitions taken) appended to
    ``startups``, if given."""
    target = last_position(coord)
    start = time.perf_counter()
    def ready() -> None:
        if startups is not None:
            startups.append(time.perf_counter() - start)

    with worker(database_url, es_url, alias, ready):
        if before is not None:
            before()
            target = last_position(coord)
        assert coord.wait_indexed(target, 3600, consumer=consumer_for(alias))
        return time.perf_counter() - start


def cpu_worker_to(coord: Coordinator, database_url: str, es_url: str, alias: str,
                  before: Any = None) -> float:
    """CPU seconds of this process (user + system) from starting a worker to it having
    applied the whole log. The bench's own threads wait meanwhile (``wait_indexed``):
    what is counted is the worker's."""
    start = time.process_time()
    time_worker_to(coord, database_url, es_url, alias, before)
    return time.process_time() - start


@contextmanager
def profiled_threads(top: int = 15) -> Iterator[None]:
    """cProfile of every thread started inside the block (the worker's partitions,
    lanes and pools), timed by each thread's own CPU clock (waits cost nothing, and
    neither do the other processes on a loaded machine); prints the merged ``top``
    functions by own CPU time on exit."""
    profiles: list[cProfile.Profile] = []
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        profiles.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]
    out = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=out)
    for p in profiles[1:]:
        stats.add(p)
    stats.sort_stats("tottime").print_stats(top)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()
                    and not line.startswith(("   Ordered", "   List reduced"))))


def cpu_part(coord: Coordinator, pg: Any, database_url: str, es: SearchEngine, es_url: str,
             n: int, renamed: int, rounds: int) -> dict[str, Any]:
    """Worker CPU per document for (a) creates, (b) an import, (c) a rename's
    descendants; then the profile of one more run of (a) and of (c)."""
    nodes = create_events(coord, "creates", n)
    import_url = pg.create_database("bench_indexer_import")
    import_coord, import_nodes = import_tree(import_url, n)
    coord.create_namespace("big")
    coord.mkdir("big", "/top")
    made = 0
    part = 0
    while made < renamed:
        files = min(19_999, renamed - made - 1)
        _, count = bulk_subtree(coord, "big", "/top", f"p{part}", dirs=1, files_per_dir=files)
        made += count
        part += 1
    # (a) is measured on a namespace of its own: the rename's subtree is indexed too by a
    # fresh alias, so its documents are counted with (a)'s.
    per_doc: dict[str, list[float]] = {"create": [], "import": [], "rename": []}
    loads: list[str] = []

    def create_round(alias: str) -> float:
        return cpu_worker_to(coord, database_url, es_url, alias) / (nodes + made + 1)

    def rename_round(alias: str, k: int) -> float:
        time_worker_to(coord, database_url, es_url, alias)  # everything indexed first
        old, new = ("/top", "renamed") if k % 2 == 0 else ("/renamed", "top")
        return cpu_worker_to(coord, database_url, es_url, alias,
                             before=lambda: coord.rename("big", old, new)) / made

    for r in range(rounds):
        loads.append(load_average())
        alias = f"bench-cpu-create-{r}"
        per_doc["create"].append(create_round(alias))
        per_doc["rename"].append(rename_round(alias, r))
        elasticsearch_index.drop_alias_and_indices(es, alias)
        alias = f"bench-cpu-import-{r}"
        per_doc["import"].append(
            cpu_worker_to(import_coord, import_url, es_url, alias) / import_nodes)
        elasticsearch_index.drop_alias_and_indices(es, alias)
    loads.append(load_average())
    print(table(
        ["worker CPU per document", "µs (median)", "rounds (µs)", "documents"],
        [
            ["(a) initial indexing, created events", f"{median(per_doc['create']) * 1e6:.0f}",
             ", ".join(f"{x * 1e6:.0f}" for x in per_doc["create"]), f"{nodes + made + 1:,}"],
            ["(b) an import", f"{median(per_doc['import']) * 1e6:.0f}",
             ", ".join(f"{x * 1e6:.0f}" for x in per_doc["import"]), f"{import_nodes:,}"],
            ["(c) a directory rename's descendants", f"{median(per_doc['rename']) * 1e6:.0f}",
             ", ".join(f"{x * 1e6:.0f}" for x in per_doc["rename"]), f"{made:,}"],
        ],
    ))
    print(f"  load averages around the rounds: {' | '.join(loads)}")
    results = {"cpu_us_per_doc": {k: [x * 1e6 for x in v] for k, v in per_doc.items()},
               "cpu_loads": loads}
    print("\nprofile of (a), initial indexing, top 15 by own CPU time:")
    with profiled_threads():
        create_round("bench-cpu-profile")
    print("\nprofile of (c), the rename's descendants, top 15 by own CPU time:")
    with profiled_threads():
        rename_round("bench-cpu-profile", rounds)
    elasticsearch_index.drop_alias_and_indices(es, "bench-cpu-profile")
    import_coord.close()
    return results


def latency(coord: Coordinator, es: SearchEngine, database_url: str, es_url: str,
            alias: str, rate: float, seconds: float) -> list[float]:
    """Commit-to-visible seconds of each change made at a steady ``rate``."""
    ns = f"lat{int(rate)}"
    coord.create_namespace(ns)
    files = [coord.create_file(ns, f"/w{i}", "0").node.id for i in range(50)]
    samples: list[float] = []
    pending: dict[tuple[str, int], float] = {}
    lock = threading.Lock()
    done = threading.Event()
    give_up = threading.Event()

    def poller() -> None:
        # One realtime multi-get for every change not yet seen, every 2 ms: light enough
        # not to disturb what it measures (one checker thread per change would).
        while not (done.is_set() and not pending) and not give_up.is_set():
            with lock:
                wanted = list(pending.items())
            if wanted:
                try:
                    got = es.mget(index=alias, realtime=True,
                                  docs=[{"_id": i, "routing": ns} for (i, _), _ in wanted])
                except SearchError as exc:
                    # A slow answer on a loaded machine must not end the measurement.
                    print(f"  poll failed, retrying: {type(exc).__name__}")
                    continue
                now = time.perf_counter()
                for ((node_id, seq), committed), doc in zip(wanted, got["docs"], strict=True):
                    if doc.get("found") and int(doc["_source"]["seq"]) >= seq:
                        with lock:
                            pending.pop((node_id, seq), None)
                        samples.append(now - committed)
            time.sleep(0.002)

    def client(k: int, per_thread: float, stop_at: float) -> None:
        i = 0
        next_at = time.perf_counter()
        while next_at < stop_at:
            if i % 2:
                r = coord.write_file(ns, files[(k * 7 + i) % len(files)], f"v{k}-{i}")
            else:
                r = coord.create_file(ns, f"/c{k}-{i}", f"new {i}")
            committed = time.perf_counter()
            assert r.seq is not None
            with lock:
                pending[(r.node.id, r.seq)] = committed
            i += 1
            next_at += 1.0 / per_thread
            time.sleep(max(0.0, next_at - time.perf_counter()))  # steady rate pacing

    with worker(database_url, es_url, alias):
        # A fresh alias is a fresh consumer: it indexes the whole log first (the parts
        # above made hundreds of thousands of documents). Measured from a caught-up
        # worker, or the first samples are the catch-up's length.
        assert coord.wait_indexed(last_position(coord), 3600, consumer=consumer_for(alias))
        watcher = threading.Thread(target=poller, daemon=True)
        watcher.start()
        stop_at = time.perf_counter() + seconds
        clients = min(4, max(1, int(rate // 50) or 1))
        threads = [
            threading.Thread(target=client, args=(k, rate / clients, stop_at))
            for k in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        watcher.join(60)
        give_up.set()
        watcher.join(10)
    if pending:
        print(f"  {len(pending)} changes of {ns} not visible 60 s after the load stopped")
    return samples


def print_throughput(raw: list[float], work: list[float], imported: list[float],
                     overwrite: float, made: int, rename_s: float,
                     ready: dict[str, list[float]]) -> None:
    """The rates table; ``ready``: the worker's rates counted from its being ready."""
    raw_m, work_m, imported_m = median(raw), median(work), median(imported)
    from_ready = [[f"  the same, from the worker ready ({name})", f"{median(xs):,.0f}",
                   len(xs), f"{median(xs) / raw_m:.2f}"] for name, xs in ready.items() if xs]
    rename_rate = made / rename_s
    print(table(
        ["measure", "docs/s (median)", "rounds", "vs raw"],
        [
            ["raw streaming_bulk, create", f"{raw_m:,.0f}", len(raw), "1.00"],
            ["worker, create events", f"{work_m:,.0f}", len(work), f"{work_m / raw_m:.2f}"],
            ["worker, an import", f"{imported_m:,.0f}", len(imported),
             f"{imported_m / raw_m:.2f}"],
            *from_ready,
            ["raw streaming_bulk, overwrite", f"{overwrite:,.0f}", 1, "1.00"],
            [f"worker, rename of {made:,} descendants", f"{rename_rate:,.0f}", 1,
             f"{rename_rate / overwrite:.2f}"],
        ],
    ))
    print(f"  raw create rounds: {', '.join(f'{x:,.0f}' for x in raw)}")
    print(f"  worker create rounds: {', '.join(f'{x:,.0f}' for x in work)}")
    print(f"  worker import rounds: {', '.join(f'{x:,.0f}' for x in imported)}")
    print(f"  rename: {rename_s:.1f} s for {made:,} documents")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="documents for create rates")
    parser.add_argument("--rename", type=int, default=100_000, help="descendants renamed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--latency-only", action="store_true",
                        help="skip the throughput parts (1-4)")
    parser.add_argument("--cpu", action="store_true",
                        help="only the worker's CPU per document (6), with profiles")
    parser.add_argument("--no-latency", action="store_true",
                        help="skip the latency part (5)")
    parser.add_argument("--results", type=Path,
                        help="write this run's figures to this JSON file (merged into it "
                             "if it exists: a --cpu run and a rates run make one file)")
    parser.add_argument("--before", type=Path,
                        help="a --results file of a run on older code: plot it beside "
                             "this run's (bench/plots/, --plot and "
                             "bench/plots/worker_cpu_per_doc.png)")
    parser.add_argument("--plot", default="indexing_vs_raw.png",
                        help="file name (in bench/plots) of the rates against raw bulk")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if os.environ.get("BENCH_LOG"):
        from indexer.logs import configure

        configure(logging.INFO)
    print(f"bench_indexer {now_utc()}  load before: {load_average()}")
    with migrated_cluster("bench_indexer") as (pg, database_url), search_server() as es_url:
        es = open_search(es_url, request_timeout=600)
        coord = Coordinator.connect(database_url)
        if args.cpu:
            found = cpu_part(coord, pg, database_url, es, es_url, args.n, args.rename,
                             args.rounds)
            es.close()
            coord.close()
            print(f"load after: {load_average()}")
            save_and_plot(args.results, args.before, found, args.plot)
            return
        raw: list[float] = []
        work: list[float] = []
        imported: list[float] = []
        ready: dict[str, list[float]] = {"create": [], "import": []}
        made, rename_s, overwrite = 0, float("nan"), float("nan")
        if not args.latency_only:
            nodes = create_events(coord, "creates", args.n)
            import_url = pg.create_database("bench_indexer_import")
            import_coord, import_nodes = import_tree(import_url, args.n)
            for r in range(args.rounds):
                index = f"bench-raw-{r}"
                elasticsearch_index.create_index(es, index)
                ids = [str(uuid.uuid4()) for _ in range(nodes)]
                raw.append(raw_bulk(es, index, nodes, ids, "/raw", 1))
                es.delete_index(index)
                alias = f"bench-create-{r}"
                # A fresh alias = a fresh consumer: the worker applies every create again.
                startups: list[float] = []
                seconds = time_worker_to(coord, database_url, es_url, alias, startups=startups)
                work.append(nodes / seconds)
                ready["create"].append(nodes / (seconds - startups[-1]))
                elasticsearch_index.drop_alias_and_indices(es, alias)
                alias = f"bench-import-{r}"
                seconds = time_worker_to(import_coord, import_url, es_url, alias,
                                         startups=startups)
                imported.append(import_nodes / seconds)
                ready["import"].append(import_nodes / (seconds - startups[-1]))
                elasticsearch_index.drop_alias_and_indices(es, alias)
            import_coord.close()
            print(f"creates and imports done, load: {load_average()}", flush=True)

            # Rename of a directory with args.rename descendants.
            coord.create_namespace("big")
            coord.mkdir("big", "/top")
            made = 0
            part = 0
            while made < args.rename:
                files = min(19_999, args.rename - made - 1)
                _, count = bulk_subtree(coord, "big", "/top", f"p{part}", dirs=1,
                                        files_per_dir=files)
                made += count
                part += 1
            alias = "bench-rename"
            time_worker_to(coord, database_url, es_url, alias)  # index the subtree first
            rename_s = time_worker_to(
                coord, database_url, es_url, alias,
                before=lambda: coord.rename("big", "/top", "renamed"),
            )
            elasticsearch_index.drop_alias_and_indices(es, alias)
            index = "bench-raw-overwrite"
            elasticsearch_index.create_index(es, index)
            ids = [str(uuid.uuid4()) for _ in range(made)]
            raw_bulk(es, index, made, ids, "/before", 1)
            overwrite = raw_bulk(es, index, made, ids, "/after", 2)
            es.delete_index(index)
            print(f"rename done, load: {load_average()}", flush=True)

        lat: list[float] = []
        light: list[float] = []
        if not args.no_latency:
            lat = latency(coord, es, database_url, es_url, "bench-latency", args.rate,
                          args.seconds)
            light = latency(coord, es, database_url, es_url, "bench-latency", 5.0,
                            args.seconds)
            elasticsearch_index.drop_alias_and_indices(es, "bench-latency")
        es.close()
        coord.close()

    print()
    if not args.latency_only:
        print_throughput(raw, work, imported, overwrite, made, rename_s, ready)
    if not args.no_latency:
        print(table(
            ["commit-to-visible (realtime GET)", "samples", "p50 ms", "p99 ms", "max ms"],
            [
                [f"{rate:.0f} changes/s for {args.seconds:.0f} s", len(xs),
                 f"{percentile(xs, 0.5) * 1000:.1f}", f"{percentile(xs, 0.99) * 1000:.1f}",
                 f"{max(xs, default=float('nan')) * 1000:.1f}"]
                for rate, xs in ((args.rate, lat), (5.0, light))
            ],
        ))
    print(f"load after: {load_average()}")
    if not args.latency_only:
        save_and_plot(args.results, args.before, {
            "rates": {"raw_create": raw, "worker_create": work, "worker_import": imported,
                      "worker_create_from_ready": ready["create"],
                      "worker_import_from_ready": ready["import"],
                      "raw_overwrite": overwrite, "rename_docs": made,
                      "rename_seconds": rename_s},
            "rates_load_after": load_average(),
        }, args.plot)


def _ratios(rates: dict[str, Any]) -> dict[str, float]:
    raw = median(rates["raw_create"])
    return {"initial indexing\n(created events)": median(rates["worker_create"]) / raw,
            "an import's\nindexing": median(rates["worker_import"]) / raw,
            "directory rename\n(descendants)":
                rates["rename_docs"] / rates["rename_seconds"] / rates["raw_overwrite"]}


_CPU_LABELS = {"create": "(a) initial indexing", "import": "(b) an import",
               "rename": "(c) rename's descendants"}


def save_and_plot(results: Path | None, before: Path | None, found: dict[str, Any],
                  plot: str = "indexing_vs_raw.png") -> None:
    """Merge ``found`` into ``results`` (if given) and draw what both it and ``before``
    hold: the rates against raw bulk (to ``plot`` in bench/plots), the CPU per
    document."""
    if results is None:
        return
    merged = read_results(results) if results.exists() else {}
    merged.update(found)
    write_results(results, merged)
    runs = {"after": merged}
    if before is not None:
        runs = {"before": read_results(before), **runs}
    with_rates = {k: _ratios(v["rates"]) for k, v in runs.items() if "rates" in v}
    if with_rates:
        measures: dict[str, dict[str, float]] = {}
        for run, ratios in with_rates.items():
            for name, ratio in ratios.items():
                measures.setdefault(name, {})[run] = ratio
        print("plot:", ratios_to_ceiling(
            measures, PLOTS_DIR / plot, goal=0.8,
            title="worker rate / raw streaming_bulk on the same node (median of rounds)"))
    with_cpu = {k: v["cpu_us_per_doc"] for k, v in runs.items() if "cpu_us_per_doc" in v}
    if with_cpu:
        measures = {label: {run: median(cpu[key]) for run, cpu in with_cpu.items()}
                    for key, label in _CPU_LABELS.items()}
        print("plot:", ratios_to_ceiling(
            measures, PLOTS_DIR / "worker_cpu_per_doc.png", ylabel="us per document",
            title="worker CPU per indexed document (process CPU time, median of rounds)"))


if __name__ == "__main__":
    main()
