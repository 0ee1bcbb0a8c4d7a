"""Numbers per search engine: raw bulk ceiling, initial indexing, rename load, replay.

Run: ``python bench/bench_engines.py`` (every engine and version Pathkeeper is tested
with, one after the other) or ``python bench/bench_engines.py opensearch:2.19.1
elasticsearch`` (an engine alone means its default version). ``--help`` for sizes.

For each engine and version the bench starts its own node
(``pathkeeper.local.search.new_local_search``; ``ES_URL`` is ignored) and its own
PostgreSQL, and measures against that node, in one run:

1. **raw bulk ceiling** and **initial indexing**, alternated for ``--rounds`` rounds:
   ``bench_indexer.raw_bulk`` (the client's ``streaming_bulk``, documents of the indexer's
   exact shape, no Pathkeeper) beside the worker indexing a log of about ``--n``
   ``created`` events (transactions of 1,000 nodes) into a fresh alias, from start to
   caught up (``bench_indexer.time_worker_to``). Medians; the ratio is the median of the
   per-round ratios (pairs measured seconds apart, so load drift cancels better).
2. **rename load**: ``bench_rename_load.py`` as a child process pointed at the node
   (``ES_URL``): 20,011 nodes, 4 clients renaming for ``--rename-seconds`` at
   ``--rename-rate`` renames/s (0: flat out), the worker in a process of its own; busy /
   ideal (the ideal from its own raw overwrite rate on this node), catch-up, file rename
   lag p50 / p99 and the index against PostgreSQL at the end (missing / extra / wrong).
3. **replay end to end**: ``bench_replay``'s generated log (``--replay-events`` events
   ending in ``--replay-docs`` live documents), then ``--rounds`` rounds of
   ``bench_replay.replay_round`` (raw read, set fold, raw bulk of the documents replay
   writes, replay into a fresh index and alias swap); docs/s end to end and its ratio to
   the raw bulk rate of the same documents, and the load phase alone against that rate.

The machine is shared: every number is printed with the load average around it, and
only ratios measured against the same node in the same run are meant to be compared.
A part that fails is reported as failed with its error, not left out.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import bench_indexer
import bench_replay
from common import ROOT, load_average, median, migrated_cluster, now_utc, table

from coordinator import Coordinator
from coordinator.migrate import upgrade
from indexer import elasticsearch_index
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from pathkeeper.local.search import new_local_search
from pathkeeper.local.search_node import DEFAULT_VERSION, ENGINES, RELEASES

RENAME_LOAD = Path(__file__).resolve().parent / "bench_rename_load.py"

#: The rows of ``bench_rename_load.py``'s result table this bench keeps.
RENAME_ROWS = {
    "raw": "raw bulk overwrite, docs/s (median)",
    "busy_s": "busy: load start to caught up, s",
    "catch_up_s": "catch-up after the load, s",
    "busy_ideal": "busy / ideal",
    "lag": "file rename lag p50 / p99 / max, ms",
    "lag_ack": "same, to the worker's bulk acknowledged (no poller), ms",
    "index": "index vs PostgreSQL: docs / missing / extra / wrong",
}


@dataclass
class EngineResult:
    label: str
    started: str = ""
    node_start_s: float = float("nan")
    raw: list[float] = field(default_factory=list)
    initial: list[float] = field(default_factory=list)
    initial_docs: int = 0
    initial_load: str = ""
    rename: dict[str, str] = field(default_factory=dict)
    rename_load: str = ""
    replay: list[dict[str, float]] = field(default_factory=list)
    replay_load: str = ""
    failures: list[str] = field(default_factory=list)

    def ratio(self) -> float:
        return median([w / r for r, w in zip(self.raw, self.initial, strict=False)])


def engines_from(names: list[str]) -> list[tuple[str, str]]:
    """``engine[:version]`` arguments as (engine, version); all tested releases when none."""
    if not names:
        return sorted(RELEASES)
    out = []
    for name in names:
        engine, _, version = name.partition(":")
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}: expected one of "
                             f"{', '.join(ENGINES)}")
        version = version or DEFAULT_VERSION[engine]
        if (engine, version) not in RELEASES:
            known = ", ".join(v for (e, v) in sorted(RELEASES) if e == engine)
            raise ValueError(f"{engine} {version} is not tested: supported {known}")
        out.append((engine, version))
    return out


def loads(before: str) -> str:
    """The 1-minute load average before and now, as "a -> b"."""
    return f"{before.split()[0]} -> {load_average().split()[0]}"


def ceiling_and_initial(res: EngineResult, database_url: str, es: SearchEngine, es_url: str,
                        n: int, rounds: int) -> None:
    """Part 1: raw bulk of the created documents, then the worker indexing the same
    number from the log into a fresh alias, ``rounds`` times."""
    coord = Coordinator.connect(database_url)
    try:
        docs = bench_indexer.create_events(coord, "creates", n)
        res.initial_docs = docs
        # Untimed: a fresh node's first bulk pays for class loading and JIT.
        elasticsearch_index.create_index(es, "bench-engines-warmup")
        bench_indexer.raw_bulk(es, "bench-engines-warmup", docs,
                               [str(uuid.uuid4()) for _ in range(docs)], "/warm", 1)
        es.delete_index("bench-engines-warmup")
        before = load_average()
        for r in range(rounds):
            index = f"bench-engines-raw-{r}"
            elasticsearch_index.create_index(es, index)
            ids = [str(uuid.uuid4()) for _ in range(docs)]
            res.raw.append(bench_indexer.raw_bulk(es, index, docs, ids, "/raw", 1))
            es.delete_index(index)
            alias = f"bench-engines-create-{r}"
            # A fresh alias is a fresh consumer: the worker indexes the whole log again.
            seconds = bench_indexer.time_worker_to(coord, database_url, es_url, alias)
            res.initial.append(docs / seconds)
            elasticsearch_index.drop_alias_and_indices(es, alias)
            print(f"  round {r + 1}: raw {res.raw[-1]:,.0f} docs/s, worker "
                  f"{res.initial[-1]:,.0f} docs/s ({docs:,} docs; load "
                  f"{load_average().split()[0]})", flush=True)
        res.initial_load = loads(before)
    finally:
        coord.close()


def rename_load(res: EngineResult, es_url: str, seconds: float, rate: float) -> None:
    """Part 2: ``bench_rename_load.py`` against this node, its table's rows kept."""
    env = {**os.environ, "ES_URL": es_url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, str(RENAME_LOAD), "--seconds", str(seconds), "--rate", str(rate),
           "--raw-rounds", "1"]
    before = load_average()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    res.rename_load = loads(before)
    out = done.stdout
    print("\n".join("    " + line for line in out.splitlines()), flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench_rename_load.py exited {done.returncode}: "
                           f"{done.stderr.strip().splitlines()[-1:] or ''}")
    for line in out.splitlines():
        if line.startswith("load average: before"):
            # "load average: before 1 5 15, end of load 1 5 15, after ...": the 1-minute ones
            words = line.split()
            res.rename["load"] = f"{words[3]} -> {words[9]}"
        for key, label in RENAME_ROWS.items():
            if line.startswith(label):
                res.rename[key] = line[len(label):].strip()


def replay(res: EngineResult, url: str, es: SearchEngine, docs: int, events: int,
           rounds: int) -> None:
    """Part 3: a generated log replayed into a fresh index beside the raw bulk of the
    documents it ends with (``bench_replay``'s rounds)."""
    dirs = max(1, docs // 100)
    files = docs - dirs
    n = bench_replay.generate(url, "r", dirs, files, events - 1 - dirs - files)
    rows: list[list[object]] = []

    def report(*row: object) -> None:
        rows.append(list(row))
        print("    " + "  ".join(str(c) for c in row), flush=True)

    before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "actions.jsonl")
        bench_replay.write_actions(url, "r", path)
        # Untimed: the node's first bulk pays for class loading and JIT.
        bench_replay.raw_bulk_file(es, path, "bench-warmup", limit=10_000)
        es.delete_index("bench-warmup")
        for r in range(rounds):
            res.replay.append(bench_replay.replay_round(url, es, n, path, r + 1, report))
    res.replay_load = loads(before)


def run_engine(engine: str, version: str, args: argparse.Namespace) -> EngineResult:
    """The three parts against a node of its own; a node that does not start is a
    failure of this engine, reported, not the end of the run."""
    res = EngineResult(f"{ENGINES[engine].label} {version}", started=now_utc())
    try:
        measure_engine(res, engine, version, args)
    except Exception as exc:
        res.failures.append(f"node or PostgreSQL: {type(exc).__name__}: {exc}")
        print(f"  !! {res.failures[-1]}", flush=True)
    return res


def measure_engine(res: EngineResult, engine: str, version: str,
                   args: argparse.Namespace) -> None:
    print(f"\n=== {res.label}  {res.started}  load {load_average()}", flush=True)
    t = time.perf_counter()
    with new_local_search(engine=engine, version=version) as node, \
            migrated_cluster("bench_engines") as (pg, database_url):
        res.node_start_s = time.perf_counter() - t
        print(f"  node and PostgreSQL up in {res.node_start_s:.0f} s at {node.url}", flush=True)
        es = open_search(node.url, request_timeout=600)
        replay_url = pg.create_database("bench_engines_replay")
        upgrade(replay_url)
        parts: list[tuple[str, Callable[[], None]]] = [
            ("raw bulk + initial indexing", lambda: ceiling_and_initial(
                res, database_url, es, node.url, args.n, args.rounds)),
            ("rename load", lambda: rename_load(
                res, node.url, args.rename_seconds, args.rename_rate)),
            ("replay", lambda: replay(res, replay_url, es, args.replay_docs,
                                      args.replay_events, args.replay_rounds)),
        ]
        for name, part in parts:
            print(f"  -- {name}  load {load_average()}", flush=True)
            try:
                part()
            except Exception as exc:  # one engine's failure must not hide the others
                res.failures.append(f"{name}: {type(exc).__name__}: {exc}")
                print(f"  !! {name} failed: {type(exc).__name__}: {exc}", flush=True)
        es.close()


def summary_rows(results: list[EngineResult]) -> list[list[str]]:
    rows = []
    for res in results:
        raw_m, init_m = median(res.raw), median(res.initial)
        rp = res.replay
        rename = res.rename
        lag = rename.get("lag", "?").split(" (")[0].split(" / ")
        replay_rate = median([r["docs"] / r["replay"] for r in rp])
        replay_raw = median([r["docs"] / r["bulk"] for r in rp])
        rows.append([
            res.label,
            f"{raw_m:,.0f}",
            f"{init_m:,.0f} ({res.ratio():.2f})",
            f"{rename.get('busy_ideal', '?')}",
            f"{rename.get('catch_up_s', '?')}",
            " / ".join(lag[:2]),
            " / ".join(rename.get("index", "?").split(" / ")[1:]) or "?",
            f"{replay_raw:,.0f}",
            f"{replay_rate:,.0f} ({median([r['bulk'] / r['replay'] for r in rp]):.2f})",
            f"{median([r['bulk'] / r['replay_load'] for r in rp]):.2f}",
            f"{res.initial_load} / {rename.get('load', '?')} / {res.replay_load}",
        ])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("engines", nargs="*", metavar="ENGINE[:VERSION]",
                        help="elasticsearch, opensearch, with a version or not "
                             "(default: every tested release)")
    parser.add_argument("--n", type=int, default=5_000,
                        help="created documents for the raw bulk and initial indexing")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of raw bulk / initial indexing")
    parser.add_argument("--rename-seconds", type=float, default=10.0)
    parser.add_argument("--rename-rate", type=float, default=200.0,
                        help="renames/s of the 4 clients together (0: flat out)")
    parser.add_argument("--replay-docs", type=int, default=10_000)
    parser.add_argument("--replay-events", type=int, default=50_000)
    parser.add_argument("--replay-rounds", type=int, default=2)
    args = parser.parse_args()
    if args.replay_events - 1 <= args.replay_docs:
        parser.error("--replay-events must exceed --replay-docs")
    try:
        chosen = engines_from(args.engines)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.WARNING)
    # The OpenSearch client logs every 404 (an alias not there yet) as a warning.
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    started = time.perf_counter()
    print(f"bench_engines {now_utc()}  load {load_average()}  engines: "
          f"{', '.join(f'{e} {v}' for e, v in chosen)}")
    print(f"sizes: {args.n:,} created docs x {args.rounds} rounds; rename load "
          f"{args.rename_seconds:.0f} s at {args.rename_rate:.0f}/s on 20,011 nodes; replay "
          f"{args.replay_events:,} events -> {args.replay_docs:,} docs x "
          f"{args.replay_rounds} rounds")
    results = [run_engine(engine, version, args) for engine, version in chosen]
    print(f"\nbench_engines done {now_utc()} in {(time.perf_counter() - started) / 60:.1f} min,"
          f" load {load_average()}")
    print(table(
        ["engine", "raw bulk docs/s", "initial docs/s (ratio)", "rename busy/ideal",
         "catch-up s", "lag p50 / p99 ms", "missing / extra / wrong", "replay raw docs/s",
         "replay docs/s (ratio)", "replay load / raw", "load: initial / rename / replay"],
        summary_rows(results),
    ))
    for res in results:
        print(f"{res.label}: started {res.started}, node up in {res.node_start_s:.0f} s; "
              f"raw rounds {', '.join(f'{x:,.0f}' for x in res.raw)}; initial rounds "
              f"{', '.join(f'{x:,.0f}' for x in res.initial)} ({res.initial_docs:,} docs); "
              f"rename: raw {res.rename.get('raw', '?')}, busy {res.rename.get('busy_s', '?')} s,"
              f" lag to ack p50 / p99 {res.rename.get('lag_ack', '?')} ms, load "
              f"{res.rename.get('load', '?')}; replay rounds "
              + ", ".join(f"{r['docs'] / r['replay']:,.0f} vs raw {r['docs'] / r['bulk']:,.0f}"
                          f" docs/s ({(r['fold'] + r['bulk']) / r['replay']:.2f} x fold + raw "
                          "bulk)" for r in res.replay))
        for failure in res.failures:
            print(f"  FAILED {failure}")
    if any(res.failures for res in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
