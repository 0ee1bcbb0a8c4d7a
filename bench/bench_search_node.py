"""The local search servers' start-up cost: seconds until healthy, and memory once up.

Run: ``python bench/bench_search_node.py [--rounds 3] [--only opensearch:3.3.0 ...]``.

For each kind (every tested Elasticsearch and OpenSearch release, and the noida-db
stand-in), starts a fresh throwaway server ``--rounds`` times in alternating order and
reports the median time from ``start()`` until it answers its health check, the
resident memory of its whole process group right after, and (real nodes) the JVM heap
in use. Fetching a distribution into an empty cache is timed separately, first.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

from common import load_average, median, now_utc, process_stats, table

from pathkeeper.local.noida import LocalNoida
from pathkeeper.local.search_node import RELEASES, LocalSearchNode, distribution, find_java
from pathkeeper.local.server import LocalServer


def group_rss_mb(pgid: int) -> float:
    """Resident memory of every process in process group ``pgid``, in MB."""
    total = 0
    for pid, fields in process_stats().items():
        if int(fields[2]) != pgid:
            continue
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:  # gone meanwhile
            continue
    return total / 1024


def heap_mb(url: str) -> float:
    with urllib.request.urlopen(url + "/_nodes/stats/jvm", timeout=10) as resp:
        nodes = json.load(resp)["nodes"]
    return float(sum(n["jvm"]["mem"]["heap_used_in_bytes"] for n in nodes.values())) / 2**20


def measure(server: LocalServer) -> tuple[float, float, float | None]:
    started = time.monotonic()
    server.start()
    seconds = time.monotonic() - started
    assert server.pid is not None
    time.sleep(2)  # let the launcher settle; memory right at "healthy" still climbs
    rss = group_rss_mb(server.pid)
    heap = heap_mb(server.url) if isinstance(server, LocalSearchNode) else None
    server.close()
    return seconds, rss, heap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", default=None,
                        help="ENGINE:VERSION (e.g. opensearch:3.3.0) or noida; repeatable "
                        "(default: every tested release and noida)")
    args = parser.parse_args()
    kinds = args.only or [*(f"{e}:{v}" for e, v in RELEASES), "noida"]
    print(f"{now_utc()}  load {load_average()}")
    for kind in kinds:
        if kind == "noida":
            continue
        engine, version = kind.split(":")
        rel = RELEASES[(engine, version)]
        fetch_started = time.monotonic()
        home = distribution(rel)
        print(f"{kind}: distribution ready in {time.monotonic() - fetch_started:.1f} s at "
              f"{home}, on {find_java(rel)}")
    results: dict[str, list[tuple[float, float, float | None]]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        order = kinds if r % 2 == 0 else list(reversed(kinds))
        for kind in order:
            if kind == "noida":
                server: LocalServer = LocalNoida()
            else:
                engine, version = kind.split(":")
                server = LocalSearchNode(engine=engine, version=version)
            results[kind].append(measure(server))
    rows = []
    for kind, runs in results.items():
        heaps = [h for _, _, h in runs if h is not None]
        rows.append([
            kind, f"{median([s for s, _, _ in runs]):.1f}",
            ", ".join(f"{s:.1f}" for s, _, _ in runs),
            f"{median([m for _, m, _ in runs]):,.0f}",
            f"{median(heaps):,.0f}" if heaps else "-",
        ])
    print(table(["server", "start s (median)", "rounds", "RSS MB (median)", "heap used MB"],
                rows))
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
