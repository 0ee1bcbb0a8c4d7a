"""Shared helpers for the benchmarks in bench/: a throwaway migrated cluster, stats, tables.

Benchmarks are scripts (``python bench/<name>.py``), not tests: they print numbers
and never assert speed.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere, without installing
    sys.path.insert(0, str(ROOT))

from coordinator.migrate import upgrade  # noqa: E402
from pathkeeper.local.postgres import LocalPostgres  # noqa: E402


@contextmanager
def migrated_cluster(
    dbname: str = "bench", settings: dict[str, str] | None = None
) -> Iterator[tuple[LocalPostgres, str]]:
    """Start a throwaway PostgreSQL, create ``dbname``, migrate it to head; yield (cluster, url).

    The cluster is stopped and its directory removed on exit, also on error.
    """
    pg = LocalPostgres(extra_settings=dict(settings or {}))
    pg.start()
    try:
        url = pg.create_database(dbname)
        upgrade(url)
        yield pg, url
    finally:
        pg.stop()


def postmaster_pid(data_dir: Path) -> int:
    """The pid of the cluster whose data directory is ``data_dir``."""
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def process_stats() -> dict[int, list[str]]:
    """Every process's ``/proc/<pid>/stat`` fields after its command name (index 1 is the
    parent's pid, 2 the process group, 11 and 12 user and system CPU ticks). Linux only;
    a process gone meanwhile is left out."""
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
    return out


def pin_apart(pg: LocalPostgres, server_cpus: int) -> tuple[list[int], list[int]]:
    """Give the cluster the first ``server_cpus`` of this process's CPUs and this process
    the others: the postmaster and every process it has started are pinned (the backends
    it starts later inherit its CPUs), and so is everything this process starts later
    (its threads, client processes, pgbench). So the server has cores of its own, as where
    the clients run on other machines. Linux only. Returns (the server's, the clients')."""
    cpus = sorted(os.sched_getaffinity(0))
    if not 0 < server_cpus < len(cpus):
        raise SystemExit(f"--server-cpus must leave the clients a CPU: this process has "
                         f"{len(cpus)}")
    server, clients = cpus[:server_cpus], cpus[server_cpus:]
    postmaster = postmaster_pid(pg.data_dir)
    os.sched_setaffinity(postmaster, server)  # first: what it forks from now on inherits
    for pid, fields in process_stats().items():
        if int(fields[1]) == postmaster:
            try:
                os.sched_setaffinity(pid, server)
            except ProcessLookupError:  # gone meanwhile
                continue
    os.sched_setaffinity(0, clients)
    return server, clients


def load_average() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain fixed-width table (first column left-aligned, the others right-aligned)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        pairs = enumerate(zip(r, widths, strict=True))
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs)

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)
