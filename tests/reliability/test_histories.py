"""Concurrent histories: N client processes on overlapping subtrees, then the checks.

Each client is a real process (multiprocessing ``spawn``: no state inherited from
pytest) with its own ``Coordinator`` and pool. After the run:

* the stored tree is valid (one root, every node reaches it, so no cycle; sibling
  names unique; nothing under a file), by SQL on ``nodes``;
* the recorded history is explained by the event log (``history_check``): no
  acknowledged change lost, nothing in the log that no client acknowledged
  except the in-flight calls of killed clients;
* folding the whole log read through ``read_events`` (as a consumer reads it)
  reproduces the ``nodes`` table exactly, and replay's set fold (``indexer.setfold``)
  equals the sequential fold at a sample of the log's transaction boundaries.

The fault variant sends SIGKILL to a random client several times mid-run and
starts a new incarnation in its place; the killed call may have committed or
not, never partly (its events, if any, must be exactly that call's).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator import Coordinator

from .dbcheck import (
    fold_log,
    set_fold_violations,
    setfold_rows,
    table_rows,
    tree_violations,
)
from .history_check import Ev, check_history, read_log
from .history_client import TOPS, client_main

NS = "hist"


def run_history(
    url: str, coord: Coordinator, logs: Path, clients: int, seconds: float, kill: bool,
    keep_going: Callable[[], bool] | None = None,
) -> tuple[Counter[str], list[str]]:
    """Run the workload, kill clients if asked, and check it; returns (counters, violations).

    ``keep_going``: after ``seconds``, the workload goes on while it answers True (at most a
    minute more): for a caller whose own fault, injected meanwhile, needs a loaded machine
    more time to happen often enough."""
    setup = [coord.create_namespace(NS).seq] + [coord.mkdir(NS, f"/{t}").seq for t in TOPS]
    ctx = multiprocessing.get_context("spawn")
    rng = random.Random(os.getpid())
    stop_file = logs / "STOP"
    procs: dict[int, multiprocessing.process.BaseProcess] = {}
    incarnations = Counter[int]()

    def start(i: int) -> None:
        name = f"c{i}.{incarnations[i]}"
        p = ctx.Process(
            target=client_main,
            args=(url, NS, rng.randrange(2**32), str(stop_file), str(logs / f"{name}.jsonl")),
            name=name,
        )
        p.start()
        procs[i] = p
        incarnations[i] += 1

    def calling(p: multiprocessing.process.BaseProcess) -> bool:
        """The client has logged its first call (it is past its imports)."""
        log = logs / f"{p.name}.jsonl"
        return log.exists() and log.stat().st_size > 0

    for i in range(clients):
        start(i)
    kills = 0
    try:
        # The run's clock starts when every client is calling (spawning and importing
        # take seconds on a loaded machine); a client that died fails the wait.
        deadline = time.monotonic() + 120
        while not all(calling(p) for p in procs.values()):
            assert all(p.is_alive() for p in procs.values()), "a client died at start"
            assert time.monotonic() < deadline, "clients did not start"
            time.sleep(0.05)
        stop_at = time.monotonic() + seconds
        while kill and time.monotonic() < stop_at - 0.5:
            # Random fault timing, not synchronisation: any moment is a valid one.
            time.sleep(rng.uniform(0.3, 1.0))
            i = rng.randrange(clients)
            victim = procs[i]
            # Only a client that is calling: killing one still importing tests nothing.
            if victim.pid is None or not victim.is_alive() or not calling(victim):
                continue
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(10)
            kills += 1
            start(i)
        time.sleep(max(0.0, stop_at - time.monotonic()))  # the workload's duration
        longest = time.monotonic() + 60.0
        while keep_going is not None and keep_going() and time.monotonic() < longest:
            time.sleep(0.1)  # waiting on the caller's fault injection, in another thread
        stop_file.touch()
        for p in procs.values():
            p.join(60)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join(10)
    for i, p in procs.items():
        assert p.exitcode == 0, f"client {i} exited with {p.exitcode}"

    calls = [c for log in sorted(logs.glob("*.jsonl")) for c in read_log(log)]
    with coord.engine.connect() as conn:
        events = [
            Ev(int(r.position), r.type, str(r.node_id) if r.node_id else None, r.payload)
            for r in conn.execute(
                text("SELECT position, type, node_id, payload FROM events "
                     "WHERE namespace = :ns ORDER BY position"),
                {"ns": NS},
            )
        ]
    report = check_history(calls, events, [s for s in setup if s is not None])
    violations = list(report.violations)
    violations += tree_violations(coord.engine, NS)
    # Concurrent renames may leave old payload paths (documented in coordinator/event_reader.py):
    # counted, not failed; the fold itself works from ids.
    fold, read = fold_log(coord, [NS], strict_paths=False)
    if fold.applied != len(events):
        violations.append(f"read_events gave {fold.applied} of {len(events)} events")
    table = table_rows(coord.engine, NS)
    if fold.trees[NS].rows() != table:
        violations.append("the folded event log differs from the nodes table")
    if setfold_rows(coord.engine, NS) != table:
        violations.append("setfold of the event log differs from the nodes table")
    # Replay's and verify's fold (set-based, in PostgreSQL) agrees with the sequential one
    # at transaction boundaries of this concurrent history, and with the table at its end.
    violations += set_fold_violations(coord.engine, read, NS, table)
    counters = report.counters
    counters["stale_payload_paths"] = len(fold.stale_paths)
    counters["kills"] = kills
    counters["clients"] = clients
    counters["nodes_at_end"] = len(fold.trees[NS].nodes)
    return counters, violations


@pytest.mark.parametrize("kill", [False, True], ids=["plain", "kill-9-clients"])
def test_concurrent_history(
    database_url: str, coord: Coordinator, tmp_path: Path, long_run: bool, kill: bool
) -> None:
    clients, seconds = (8, 180.0) if long_run else (4, 8.0)
    counters, violations = run_history(database_url, coord, tmp_path, clients, seconds, kill)
    print(f"\nhistory kill={kill}: {dict(sorted(counters.items()))}")
    assert violations == [], "\n".join(violations[:20])
    # The run must have been a real concurrent history, not an idle one.
    assert counters["acknowledged_mutations"] >= 10 * clients
    if kill:
        assert counters["kills"] >= 3
