"""The local search servers' start-up cost: seconds until healthy, and memory once up.

Run: ``python bench/bench_search_node.py [--rounds 3] [--java /usr/lib/jvm/...]``.

For each kind (the real Elasticsearch node and the noida-db stand-in), starts a fresh
throwaway server ``--rounds`` times in alternating order and reports the median time
from ``start()`` until it answers its health check, the resident memory of its whole
process group right after, and (Elasticsearch) the JVM heap in use. The first
Elasticsearch start also fetches the distribution when the cache is empty; that is
timed separately.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from pathlib import Path

from common import load_average, median, now_utc, table

from pathkeeper.local.elasticsearch import (
    ELASTICSEARCH_VERSION,
    LocalElasticsearch,
    distribution,
    find_java,
)
from pathkeeper.local.noida import LocalNoida
from pathkeeper.local.server import LocalServer


def group_rss_mb(pgid: int) -> float:
    """Resident memory of every process in process group ``pgid``, in MB."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # field 5 of stat: the process group
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, IndexError, ValueError):
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
    heap = heap_mb(server.url) if isinstance(server, LocalElasticsearch) else None
    server.close()
    return seconds, rss, heap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--java", default=None, help="ES_JAVA_HOME for the node")
    args = parser.parse_args()
    if args.java:
        os.environ["ES_JAVA_HOME"] = args.java
    print(f"{now_utc()}  load {load_average()}  Elasticsearch {ELASTICSEARCH_VERSION} "
          f"on {find_java()}")
    fetch_started = time.monotonic()
    home = distribution()
    print(f"distribution ready in {time.monotonic() - fetch_started:.1f} s at {home}")
    results: dict[str, list[tuple[float, float, float | None]]] = {"elasticsearch": [],
                                                                    "noida": []}
    for r in range(args.rounds):
        order = ["elasticsearch", "noida"] if r % 2 == 0 else ["noida", "elasticsearch"]
        for kind in order:
            server: LocalServer = LocalElasticsearch() if kind == "elasticsearch" else LocalNoida()
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
