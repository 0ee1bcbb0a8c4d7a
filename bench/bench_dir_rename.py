"""A directory rename against the raw overwrite of the same documents, on one node.

Run: ``python bench/bench_dir_rename.py`` (starts its own PostgreSQL and a local
Elasticsearch node; ``ES_URL`` points it at a running one instead). ``--help`` for sizes.

The tree: one namespace with ``/big``, 10 directories of 1,000 files each with a little
content (``body D/F``): 10,011 documents, the directory included (``--dirs``,
``--files``). A worker (in this process, 2 partitions, the defaults otherwise) indexes it
into a fresh alias and is caught up before the rounds start. Then, alternately, round
after round in one run:

* **raw**: the client helpers' ``streaming_bulk`` (chunks of 1,000 actions, the
  indexer's exact document shape) overwriting the very same documents (the nodes read
  from PostgreSQL, loaded beforehand into a fresh index, not timed) with their paths
  under a new name, at a higher external version; timed from the first action until the
  last answer, then one ``_refresh`` and a ``count`` of ``tree: <new path>`` that must
  find every document;
* **ours**: ``Coordinator.rename`` of ``/big`` (to ``big1``, ``big2``...); timed from the
  moment the rename returned (committed) until the worker's checkpoint passed it
  (``wait_indexed``: every document acknowledged, so visible to a realtime GET), then the
  same ``_refresh`` and ``count`` of the new path, which must find every document.

Both times end at the same point (every document searchable under its new path after one
refresh), so ``ratio = ours / raw`` (goal <= 1.3) compares the whole thing. Medians over
``--rounds``, the load average beside each round. ``--breakdown`` then times the
rewrite's parts one after the other on the same subtree: PostgreSQL's read alone, the
read with documents built and encoded, and the requests (wall time and Elasticsearch's
own ``took``).

``--beside N``: the tree's namespace (its root alone) and another of N nodes, analyzed,
with autovacuum off for ``nodes``, then the tree, not analyzed: the rounds run in a
namespace the statistics saw empty, which the planner estimates at one row, as in the
minutes after a new tenant's first burst.

``--results FILE`` writes the figures as JSON; ``--before FILE...`` (results files of runs
on older code) puts them beside this run in ``bench/plots/dir_rename_vs_raw.png``, one bar
per run; ``--plot-only FILE...`` draws that from results files without measuring.
"""

from __future__ import annotations

import argparse
import logging
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_indexer import search_server, worker
from common import load_average, median, migrated_cluster, now_utc, table
from plots import PLOTS_DIR, ratios_to_ceiling, read_results, write_results
from sqlalchemy import text

from coordinator import Coordinator, Node
from coordinator.indexing import consumer_for
from indexer import elasticsearch_index
from indexer.bulk import encode, send_halving
from indexer.contract import index_action, is_indexed, rendered_action, under_path_query
from indexer.live_nodes import stream_subtree_entries, walk_nodes
from indexer.logs import fields_of
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from pathkeeper.local.bulk_tree import bulk_subtree

NS = "dirs"
ALIAS = "bench-dir-rename"


class LaneLog(logging.Handler):
    """The subtree lane's ``subtrees_applied`` lines: where a pass's time went."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.passes: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "subtrees_applied":
            self.passes.append(fields_of(record))


def visible_count(es: SearchEngine, index: str, path: str) -> int:
    """Documents searchable under ``path`` after one refresh."""
    es.refresh(index)
    return es.count(index, {"query": under_path_query(NS, path)})


def raw_round(es: SearchEngine, nodes: list[Node], k: int) -> tuple[float, float]:
    """(seconds to the last answer, seconds until all are counted under the new path) of
    streaming_bulk overwriting ``nodes``' documents, loaded first into a fresh index."""
    index = f"bench-dir-raw-{k}"
    elasticsearch_index.create_index(es, index)
    try:
        timed = 0.0
        for version, top in ((1, "/big"), (2, f"/raw{k}")):
            actions = (index_action(index, replace(n, path=top + n.path[len("/big"):]), version)
                       for n in nodes)
            start = time.perf_counter()
            done = sum(1 for ok, _ in es.streaming_bulk(
                actions, chunk_size=1000, max_chunk_bytes=100 * 2**20, max_retries=0,
                initial_backoff=2, max_backoff=600) if ok)
            timed = time.perf_counter() - start
            assert done == len(nodes), f"only {done} of {len(nodes)} accepted"
            if version == 1:
                es.refresh(index)
        seen = visible_count(es, index, f"/raw{k}")
        total = time.perf_counter() - start
        assert seen == len(nodes), f"raw: {seen} of {len(nodes)} visible"
        return timed, total
    finally:
        es.delete_index(index)


def our_round(coord: Coordinator, es: SearchEngine, old: str, new: str,
              expected: int) -> tuple[float, float]:
    """(seconds to the checkpoint, seconds until all are counted under the new path) of
    a rename of ``old`` to ``new``, from its commit."""
    result = coord.rename(NS, old, new)
    start = time.perf_counter()
    assert result.seq is not None
    assert coord.wait_indexed(result.seq, 600, consumer=consumer_for(ALIAS))
    acked = time.perf_counter() - start
    seen = visible_count(es, ALIAS, f"/{new}")
    total = time.perf_counter() - start
    assert seen == expected, f"ours: {seen} of {expected} visible"
    return acked, total


def breakdown(coord: Coordinator, es: SearchEngine, top_path: str) -> dict[str, float]:
    """The rewrite's parts, one after the other, on the subtree at ``top_path``."""
    top = coord.stat(NS, top_path)
    parts: dict[str, float] = {}
    with coord.engine.connect() as raw:
        conn = raw.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            t0 = time.perf_counter()
            with closing(stream_subtree_entries(conn, ALIAS, top, 10**12,
                                                {top.id: 10**12})) as s:
                rows = sum(1 for _ in s)
            parts["PostgreSQL read (rendered entries)"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            with closing(stream_subtree_entries(conn, ALIAS, top, 10**12,
                                                {top.id: 10**12})) as s:
                encoded = [(a, encode(a)) for a in (
                    rendered_action(ALIAS, NS, node_id, v, entry)
                    for node_id, v, entry in s if entry is not None)]
            parts["read + build + encode"] = time.perf_counter() - t0
    took = 0
    t0 = time.perf_counter()
    for i in range(0, len(encoded), 500):
        # At a version below the stored one: every item answers 409, so the index is
        # left as it is; the server still does a version lookup per document.
        took += sum(answer.took for answer in send_halving(es, encoded[i:i + 500], []))
    parts["requests of 500, one at a time, wall (409s)"] = time.perf_counter() - t0
    parts["  of which Elasticsearch took"] = took / 1000
    parts["documents"] = float(rows)
    return parts


def plot(runs: list[dict[str, Any]]) -> Path:
    """Median ratio of each run, the k-th run of each label (before, after) side by
    side as pair k, and every round of each label pooled."""
    measures: dict[str, dict[str, float]] = {}
    seen: dict[str, int] = {}
    pooled: dict[str, list[float]] = {}
    for r in runs:
        label = r["label"] or "run"
        seen[label] = seen.get(label, 0) + 1
        measures.setdefault(f"run pair {seen[label]}", {})[label] = float(r["ratio"])
        pooled.setdefault(label, []).extend(r["ratios"])
    if len(runs) > 2:
        measures["all rounds pooled"] = {label: median(xs) for label, xs in pooled.items()}
    beside = runs[-1].get("beside", 0)
    name = "dir_rename_new_namespace_vs_raw.png" if beside else "dir_rename_vs_raw.png"
    where = f" in a namespace the statistics saw empty ({beside:,} nodes beside)" if beside else ""
    return ratios_to_ceiling(
        measures, PLOTS_DIR / name,
        title=f"{runs[-1]['documents']:,}-document directory rename{where},\ncommit to "
              "searchable / raw streaming_bulk overwrite of the same documents "
              "(same run), median",
        goal=1.3, ylabel="time / raw overwrite time (lower is better)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dirs", type=int, default=10)
    parser.add_argument("--files", type=int, default=1000, help="files per directory")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--results", type=Path, help="write the figures here (JSON)")
    parser.add_argument("--before", type=Path, nargs="*", default=[],
                        help="results files of runs on older code: plotted before this one")
    parser.add_argument("--plot-only", type=Path, nargs="*",
                        help="measure nothing: plot these results files (and --before's)")
    parser.add_argument("--label", default="", help="a name for this run in the results")
    parser.add_argument("--beside", type=int, default=0,
                        help="nodes of a namespace analyzed before the tree is made "
                             "(the tree's namespace then newer than the statistics)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.plot_only is not None:
        runs = [read_results(p) for p in [*args.before, *args.plot_only]]
        print(f"plot: {plot(runs)}")
        return
    print(f"bench_dir_rename {now_utc()}  load before: {load_average()}", flush=True)
    with migrated_cluster("bench_dir_rename") as (_pg, database_url), \
            search_server() as es_url:
        es = open_search(es_url, request_timeout=600)
        coord = Coordinator.connect(database_url)
        coord.create_namespace(NS)
        if args.beside:
            coord.create_namespace("beside")
            bulk_subtree(coord, "beside", "/", "b", dirs=max(1, args.beside // 100),
                         files_per_dir=99)
            with coord.engine.connect() as conn, conn.begin():
                conn.execute(text("ALTER TABLE nodes SET (autovacuum_enabled = false)"))
                conn.execute(text("ANALYZE nodes"))
        _, made = bulk_subtree(coord, NS, "/", "big", dirs=args.dirs, files_per_dir=args.files)
        with coord.engine.connect() as conn, conn.begin():
            if not args.beside:
                conn.execute(text("ANALYZE nodes"))
            nodes = [n for n in walk_nodes(conn, NS) if is_indexed(n)]
        assert len(nodes) == made
        rows: list[list[str]] = []
        raw_s: list[float] = []
        ours_s: list[float] = []
        ratios: list[float] = []
        current = "big"
        lane_log = LaneLog()
        indexer_logger = logging.getLogger("pathkeeper.indexer")
        indexer_logger.addHandler(lane_log)
        indexer_logger.setLevel(logging.INFO)
        indexer_logger.propagate = False
        with worker(database_url, es_url, ALIAS):
            with coord.engine.connect() as conn:
                last = int(conn.execute(text("SELECT max(position) FROM events")).scalar_one())
            assert coord.wait_indexed(last, 600, consumer=consumer_for(ALIAS))
            for k in range(args.rounds):
                load = load_average()
                raw_acked, raw_total = raw_round(es, nodes, k)
                new = f"big{k + 1}"
                acked, total = our_round(coord, es, f"/{current}", new, made)
                current = new
                passes = [p for p in lane_log.passes if p.get("indexed")]
                lane_log.passes.clear()
                if passes:
                    p = passes[-1]
                    print(f"   pass: rewrite {p['rewrite_seconds']:.3f} s, "
                          f"{p.get('rewrite_requests', '?')} requests, Elasticsearch took "
                          f"{p.get('rewrite_es_took', float('nan')):.3f} s", flush=True)
                raw_s.append(raw_total)
                ours_s.append(total)
                ratios.append(total / raw_total)
                rows.append([str(k + 1), f"{raw_acked:.3f}", f"{raw_total:.3f}",
                             f"{acked:.3f}", f"{total:.3f}", f"{total / raw_total:.2f}", load])
                print("  ".join(rows[-1]), flush=True)
            parts = breakdown(coord, es, f"/{current}") if args.breakdown else {}
        elasticsearch_index.drop_alias_and_indices(es, ALIAS)
        es.close()
        coord.close()
    print()
    print(table(["round", "raw acked s", "raw visible s", "ours acked s", "ours visible s",
                 "ours / raw", "load (1/5/15)"], rows))
    ratio = median(ratios)
    print(f"\n{made:,} documents: raw {median(raw_s):.3f} s, ours {median(ours_s):.3f} s "
          f"(medians); ratio ours / raw: median {ratio:.2f} (per round "
          f"{', '.join(f'{r:.2f}' for r in ratios)}); load after: {load_average()}")
    if parts:
        print()
        print(table(["rewrite part (one after the other)", "seconds"],
                    [[name, f"{v:.3f}" if name != "documents" else f"{v:,.0f}"]
                     for name, v in parts.items()]))
    results = {"when": now_utc(), "label": args.label, "documents": made,
               "raw_seconds": raw_s, "ours_seconds": ours_s, "ratios": ratios,
               "ratio": ratio, "raw_median": median(raw_s), "ours_median": median(ours_s),
               "loads": [r[-1] for r in rows], "breakdown": parts, "beside": args.beside}
    if args.results:
        write_results(args.results, results)
    if args.results or args.before:
        print(f"plot: {plot([*(read_results(p) for p in args.before), results])}")


if __name__ == "__main__":
    main()
