"""Failovers under a concurrent write load, with the indexer running: nothing
acknowledged is lost or duplicated, nothing unacknowledged is half applied, positions
keep increasing, the log folds to the table and Elasticsearch equals PostgreSQL.

Writer processes (each with its own connections, through the multi-host URL) create,
rename, move and delete nodes and run groups, each request with an idempotency key,
retrying ``Unavailable`` (and ``OutcomeUnknown``) with the same key until answered. The
primary is killed with SIGKILL twice, then switched over once (``FAILOVERS`` says
which). Each writer works in a subtree of its own and keeps a model of it, so every
request it sends is valid and the final tree is known. Per failover the test reports
the seconds without acknowledged writes, until a write after it was indexed, and the
lag recovery; set ``PATHKEEPER_FAILOVER_REPORT`` to a file to keep them as JSON.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import threading
import time
from collections.abc import Iterator
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.api import apply_group
from coordinator.commands import Command, CreateFile, Delete, Mkdir, Move, Rename
from coordinator.db import libpq_url
from coordinator.errors import CoordinatorError, Unavailable
from coordinator.idempotency import run_once
from coordinator.migrate import upgrade
from coordinator.results import MutationResult, block_end
from coordinator.unit_of_work import UnitOfWork
from indexer.elasticsearch_index import drop_alias_and_indices
from indexer.search_client import open_search
from indexer.verify import verify_index, verify_log
from indexer.worker import Worker, WorkerConfig
from pathkeeper.local.ha import LocalHACluster

NS = "load"
WRITERS = 3
#: "kill": SIGKILL of the primary's postmaster; "switchover": a planned change.
FAILOVERS = os.environ.get("PATHKEEPER_FAILOVERS", "kill,kill,switchover").split(",")
#: Seconds of load before the first failover, between them and after the last.
SPELL = float(os.environ.get("PATHKEEPER_FAILOVER_SPELL", "4"))
#: Run on an asynchronous cluster and report what it lost instead of failing on it.
ASYNC = os.environ.get("PATHKEEPER_FAILOVER_REPLICATION", "sync") == "async"
#: A request is given up (and the test fails) after this long without an answer.
ANSWER_WITHIN = 90.0


# ----------------------------------------------------------------- writers


class Model:
    """A writer's subtree: the paths of its directories and files."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.dirs: set[str] = {root}
        self.files: set[str] = set()

    def plan(self, rng: random.Random, k: int) -> tuple[str, list[Command]]:
        """The next request (its kind and commands); valid in the model's state."""
        kind = rng.choice(["mkdir", "create", "create", "rename", "move", "delete", "group"])
        subdirs = sorted(self.dirs - {self.root})
        files = sorted(self.files)
        if kind == "rename" and subdirs:
            d = rng.choice(subdirs)
            return kind, [Rename(d, f"n{k}")]
        if kind == "move" and files:
            return kind, [Move(rng.choice(files), f"{rng.choice(sorted(self.dirs))}/m{k}")]
        if kind == "delete" and files:
            return kind, [Delete(rng.choice(files))]
        if kind == "group":
            g = f"{self.root}/g{k}"
            return kind, [Mkdir(g), CreateFile(f"{g}/x", content=f"group {k}")]
        if kind == "create":
            return kind, [CreateFile(f"{rng.choice(sorted(self.dirs))}/f{k}", content=str(k))]
        return "mkdir", [Mkdir(f"{rng.choice(sorted(self.dirs))}/d{k}")]

    def apply(self, commands: list[Command]) -> None:
        for c in commands:
            if isinstance(c, Mkdir):
                self.dirs.add(str(c.path))
            elif isinstance(c, CreateFile):
                self.files.add(str(c.path))
            elif isinstance(c, Delete):
                self.files.discard(str(c.ref))
            elif isinstance(c, Move):
                self.files.discard(str(c.ref))
                self.files.add(str(c.dst))
            elif isinstance(c, Rename):
                old = str(c.ref)
                new = old.rsplit("/", 1)[0] + "/" + str(c.name)
                self.dirs = {_moved(p, old, new) for p in self.dirs}
                self.files = {_moved(p, old, new) for p in self.files}


def _moved(path: str, old: str, new: str) -> str:
    if path == old or path.startswith(old + "/"):
        return new + path[len(old):]
    return path


def _answer(results: list[MutationResult]) -> tuple[int, dict[str, Any]]:
    seqs = [r.seq for r in results if r.seq is not None]
    return 200, {"seq": max(seqs) if seqs else None, "ids": [r.node.id for r in results]}


def _writer(url: str, index: int, stop: MpEvent, out: str) -> None:
    """Send requests until ``stop``; each answer (or failure) is a line in ``out``."""
    rng = random.Random(index)
    model = Model(f"/w{index}")
    coord = Coordinator.connect(url, lock_timeout=5.0)
    with open(out, "w") as log:
        k = 0
        while not stop.is_set():
            kind, commands = model.plan(rng, k)
            key = f"w{index}-{k}"

            def work(uow: UnitOfWork, commands: list[Command] = commands
                     ) -> list[MutationResult]:
                return apply_group(uow, commands, 10)

            sent = time.time()
            retries = 0
            while True:
                try:
                    outcome = run_once(coord, NS, key, repr(commands), 3600.0, work, _answer)
                    break
                except Unavailable as exc:  # also OutcomeUnknown: the same key again
                    retries += 1
                    if time.time() - sent > ANSWER_WITHIN:
                        outcome = None
                        log.write(json.dumps({"key": key, "error": repr(exc)}) + "\n")
                        break
                    time.sleep(0.05)
                except CoordinatorError as exc:  # the model is no longer the tree: stop
                    outcome = None
                    log.write(json.dumps({"key": key, "error": repr(exc)}) + "\n")
                    break
            if outcome is None:
                break
            model.apply(commands)
            log.write(json.dumps({
                "key": key, "kind": kind, "seq": outcome.body["seq"], "at": time.time(),
                "sent": sent, "retries": retries, "replayed": outcome.replayed,
            }) + "\n")
            log.flush()
            k += 1
        log.write(json.dumps({"model": {"dirs": sorted(model.dirs),
                                        "files": sorted(model.files)}}) + "\n")
    coord.close()


# ------------------------------------------------------------------- test


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalHACluster]:
    # PATHKEEPER_FAILOVER_REPLICATION=async shows what asynchronous replication loses
    # (docs/failover.md): this test then fails, naming what was lost.
    with LocalHACluster(synchronous=not ASYNC) as c:
        yield c


def _until_up(fn: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_failovers_under_load_lose_and_duplicate_nothing(
    cluster: LocalHACluster, es_url: str, tmp_path: Path
) -> None:
    url = cluster.create_database("load")
    upgrade(url)
    coord = Coordinator.connect(url, lock_timeout=5.0)
    setup: list[int] = []
    setup.append(coord.create_namespace(NS).seq or 0)
    for i in range(WRITERS):
        setup.append(coord.execute(NS, Mkdir(f"/w{i}")).seq or 0)

    alias = f"pk-failover-{os.getpid()}"
    es = open_search(es_url, request_timeout=60)
    ctx = multiprocessing.get_context("fork")  # before the worker's threads start
    stop = ctx.Event()
    outs = [str(tmp_path / f"w{i}.jsonl") for i in range(WRITERS)]
    writers = [ctx.Process(target=_writer, args=(url, i, stop, outs[i]), daemon=True)
               for i in range(WRITERS)]
    for p in writers:
        p.start()
    worker = Worker(WorkerConfig(database_url=url, es_url=es_url, alias=alias,
                                 partitions=2, poll_interval=0.2))
    worker_thread = threading.Thread(target=worker.run, daemon=True)
    worker_thread.start()
    consumer = f"indexer:{alias}"
    failovers: list[dict[str, Any]] = []
    progress = CheckpointWatch(url, consumer)
    progress.start()
    try:
        time.sleep(SPELL)
        for how in FAILOVERS:
            old = cluster.wait_healthy()
            began = time.time()
            if how == "kill":
                cluster.kill_primary()
            else:
                cluster.switchover()
            new = cluster.wait_primary(other_than=old)
            promoted = time.time()
            time.sleep(SPELL)
            failovers.append({"how": how, "at": began, "promoted": promoted,
                              "from": old.name, "to": new.name})
        stop.set()
        for p in writers:
            p.join(timeout=ANSWER_WITHIN + 30)
            assert p.exitcode == 0

        acks: list[dict[str, Any]] = []
        models: list[dict[str, list[str]]] = []
        errors: list[dict[str, Any]] = []
        backwards = 0
        for out in outs:
            lines = [json.loads(line) for line in Path(out).read_text().splitlines()]
            errors += [x for x in lines if "error" in x]
            models.append(next(x["model"] for x in lines if "model" in x))
            mine = [x for x in lines if "seq" in x]
            # One writer's requests are sequential: their positions strictly increase,
            # across every failover.
            seqs = [x["seq"] for x in mine]
            backwards += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
            acks += mine
        if not ASYNC:
            assert not errors, errors
            assert backwards == 0
        assert len(acks) > 50

        # Checked on a new pool: the test's own connections died with the old primary.
        coord.close()
        coord = Coordinator.connect(url, lock_timeout=5.0)
        # Every committed transaction of the namespace is one acknowledged request (or
        # the setup): nothing acknowledged lost, none applied twice, nothing
        # unacknowledged left applied.
        committed = _committed_blocks(coord)
        expected = {block_end(s) for s in [*setup, *(a["seq"] for a in acks)]}
        if not ASYNC:
            assert committed == expected, (len(committed - expected),
                                           len(expected - committed))

        # The tree is each writer's model.
        for i, model in enumerate(models if not ASYNC else []):
            nodes = list(coord.walk(NS, f"/w{i}"))
            assert sorted(n.path for n in nodes if n.kind == "dir") == model["dirs"]
            assert sorted(n.path for n in nodes if n.kind == "file") == model["files"]

        # The log folds to the table; Elasticsearch equals PostgreSQL.
        log_report = verify_log(coord, namespaces=[NS])
        assert log_report.ok, log_report.drift[:5]
        last = max(committed)
        assert _until_up(lambda: coord.wait_indexed(last, timeout=60, consumer=consumer))
        index_report = verify_index(coord, es, alias=alias, namespaces=[NS])
        lossy: dict[str, Any] = {}
        if ASYNC:  # what was lost, and what `pathkeeper verify --repair` puts right
            lossy = {"acknowledged_lost": len(expected - committed),
                     "unacknowledged_applied": len(committed - expected),
                     "writer_errors": [e["error"] for e in errors],
                     "positions_went_back": backwards,
                     "index_drift": index_report.by_kind()}
            verify_index(coord, es, alias=alias, namespaces=[NS], repair_drift=True)
            index_report = verify_index(coord, es, alias=alias, namespaces=[NS])
        assert index_report.ok, index_report.by_kind()

        progress.stop()
        report = _measure(acks, failovers, progress.seen)
        report.update(lossy)
        report["writes_checked"] = len(acks)
        report["retried"] = sum(1 for a in acks if a["retries"])
        report["replayed"] = sum(1 for a in acks if a["replayed"])
        print(json.dumps(report, indent=1))
        if os.environ.get("PATHKEEPER_FAILOVER_REPORT"):
            Path(os.environ["PATHKEEPER_FAILOVER_REPORT"]).write_text(json.dumps(report))
    finally:
        progress.stop()
        stop.set()
        for p in writers:
            if p.is_alive():
                p.kill()
        worker.stop()
        worker_thread.join(timeout=30)
        coord.close()
        drop_alias_and_indices(es, alias)
        es.close()


def _committed_blocks(coord: Coordinator) -> set[int]:
    with coord.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT DISTINCT position FROM events WHERE namespace = :ns"), {"ns": NS})
        return {block_end(int(r[0])) for r in rows}


class CheckpointWatch(threading.Thread):
    """Polls the consumer's highest checkpoint every 0.1 s: (time, position) pairs."""

    def __init__(self, url: str, consumer: str) -> None:
        super().__init__(daemon=True)
        self.url = libpq_url(url)
        self.consumer = consumer
        self.seen: list[tuple[float, int]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                    while not self._done.wait(0.1):
                        row = conn.execute(
                            "SELECT coalesce(max(position), 0) FROM checkpoints "
                            "WHERE consumer = %s", (self.consumer,)).fetchone()
                        self.seen.append((time.time(), int(row[0]) if row else 0))
            except psycopg.Error:
                self._done.wait(0.1)

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join(timeout=5)


def _measure(acks: list[dict[str, Any]], failovers: list[dict[str, Any]],
             seen: list[tuple[float, int]]) -> dict[str, Any]:
    """Per failover, in seconds, over the span from the failure (the kill, or the
    switchover request) to a second after the new primary accepted writes:
    ``without_writes``, the longest time no writer had a request answered;
    ``without_indexing``, the longest time the checkpoint did not move;
    ``lag_recovered``, from the failure until the checkpoint covered the first write
    answered after the longest pause (the index caught up with the new primary)."""
    out = []
    for f in failovers:
        start, end = f["at"], f["promoted"] + 1.0
        entry = {"how": f["how"], "from": f["from"], "to": f["to"],
                 "promoted_after": round(f["promoted"] - start, 2)}
        times = sorted(a["at"] for a in acks)
        span = [max((t for t in times if t <= start), default=start),
                *(t for t in times if start < t <= end)]
        gaps = list(itertools.pairwise(span))
        entry["without_writes"] = round(max((b - a for a, b in gaps), default=0.0), 2)
        resumed = max(gaps, key=lambda g: g[1] - g[0])[1] if gaps else start
        moves = [t for (t, p), (_, q) in zip(seen[1:], seen, strict=False) if p > q]
        mspan = [max((t for t in moves if t <= start), default=start),
                 *(t for t in moves if start < t <= end)]
        entry["without_indexing"] = round(
            max((b - a for a, b in itertools.pairwise(mspan)), default=0.0), 2)
        first = min((a for a in acks if a["at"] >= resumed), key=lambda a: a["at"],
                    default=None)
        if first is not None:
            caught = next((t for t, p in seen if t > start and p >= first["seq"]), None)
            entry["lag_recovered"] = round(caught - start, 2) if caught else None
        out.append(entry)
    return {"failovers": out}
