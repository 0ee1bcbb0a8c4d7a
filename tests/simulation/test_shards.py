"""The multi-server simulation (docs/sharding.md section 4): three throwaway PostgreSQL
clusters (logical replication on) with the directory on the first, the shared search
node, two indexer worker processes over the directory, writer processes on namespaces of
their own, one namespace (the traveller) moved A -> B -> C by ``pathkeeper shard move``
under that load, and one other shard's postmaster killed with SIGKILL and restarted
mid-run. Afterwards: every acknowledged write is on its namespace's current shard, each
shard's log folds to its tables, the index equals the union of the shards, no namespace
has rows on two shards, and the traveller's feed read through both moves gave each of its
events once, in increasing positions.

The short form runs by default; ``PATHKEEPER_SIM_LONG=1`` runs the long one, which also
measures the same workload with every namespace on one server and prints the figures
(freeze per move, copy rate, throughput)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from coordinator.shard_admin import add_shard, init_directory
from indexer.search_engine import SearchEngine
from indexer.verify_shards import verify_shards
from pathkeeper.local.postgres import LocalPostgres

pytestmark = pytest.mark.simulation

ROOT = Path(__file__).resolve().parents[2]
SHARDS = ("default", "b", "c")
TRAVELLER = "traveller"
#: The shard killed mid-run: the traveller's last stop, down during its first move.
VICTIM = "c"


@dataclass(frozen=True)
class Form:
    nodes: int  # the traveller's, before the load
    namespaces: int
    writers: int
    seconds: float  # of load


SHORT = Form(nodes=10_000, namespaces=20, writers=4, seconds=30)
LONG = Form(nodes=100_000, namespaces=50, writers=8, seconds=60)
FORM = LONG if os.environ.get("PATHKEEPER_SIM_LONG") == "1" else SHORT


# ------------------------------------------------------------------ servers


@dataclass
class Cluster:
    """Three servers; the directory on the first."""

    servers: dict[str, LocalPostgres]
    urls: dict[str, str]
    directory: str

    def kill9(self, shard: str) -> None:
        """SIGKILL to the postmaster, then to what it leaves behind (a crash of the host's
        server, not a shutdown)."""
        pg = self.servers[shard]
        pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in [pid, *children]):
            assert time.monotonic() < deadline, "the killed server's processes linger"
            time.sleep(0.05)

    def restart(self, shard: str) -> None:
        self.servers[shard].pg_ctl_start()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def _server(name: str, started: list[LocalPostgres]) -> str:
    """A server started and migrated; the migration in a process of its own (Alembic's
    environment is one per process, so three in threads would share it)."""
    pg = LocalPostgres(logical_replication=True)
    started.append(pg)
    pg.start()
    url = pg.create_database(f"pk_sim_{name}")
    subprocess.run([sys.executable, "-c", "import sys; from coordinator.migrate import "
                    "upgrade; upgrade(sys.argv[1])", url], check=True, cwd=ROOT, env=_env())
    return url


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    started: list[LocalPostgres] = []
    try:
        # In parallel: three initdb and migrations are most of the short form's time.
        with ThreadPoolExecutor(len(SHARDS)) as pool:
            urls = dict(zip(SHARDS, pool.map(lambda n: _server(n, started), SHARDS),
                            strict=True))
        servers = {name: pg for name, pg in zip(SHARDS, _in_order(started, urls),
                                                strict=True)}
        directory = servers["default"].create_database("pk_sim_directory")
        init_directory(directory, urls["default"])
        for name in SHARDS[1:]:
            add_shard(directory, name, urls[name])
        yield Cluster(servers, urls, directory)
    finally:
        for pg in started:
            pg.stop()


def _in_order(started: list[LocalPostgres], urls: dict[str, str]) -> list[LocalPostgres]:
    """The servers in the order of ``SHARDS`` (they were started in any order)."""
    by_port = {pg.port: pg for pg in started}
    return [by_port[int(url.split(":")[2].split("/")[0])] for url in urls.values()]


# ------------------------------------------------------------------ processes


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **extra}


def _spawn(args: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, *args], stdout=out, stderr=out, cwd=ROOT,
                                env=_env(**env))


@dataclass
class WriterProc:
    log: Path
    go: Path
    namespaces: list[str]
    proc: subprocess.Popen[bytes]

    def lines(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()
                if line.startswith("{")]


def start_writers(cluster: Cluster, groups: list[list[str]], tmp: Path, tag: str
                  ) -> list[WriterProc]:
    out = []
    for i, names in enumerate(groups):
        log, go = tmp / f"writer-{tag}-{i}.log", tmp / f"writer-{tag}-{i}.go"
        proc = _spawn(["-m", "tests.simulation.sim_writer", cluster.directory,
                       str(i), str(go), str(log), ",".join(names)], tmp / f"writer-{tag}-{i}.out")
        out.append(WriterProc(log, go, names, proc))
    return out


def run_load(writers: list[WriterProc], seconds: float) -> float:
    """Wait for every writer to be set up, let them write for ``seconds``; returns the
    wall-clock end."""
    deadline = time.monotonic() + 120
    while not all(any(line.get("ready") for line in w.lines()) for w in writers):
        for w in writers:
            assert w.proc.poll() is None, (w.log.with_suffix(".out"), _tail(w))
        assert time.monotonic() < deadline, "writers not set up in 120 s"
        time.sleep(0.1)
    until = time.time() + seconds
    for w in writers:
        tmp = w.go.with_suffix(".tmp")
        tmp.write_text(str(until))
        tmp.rename(w.go)
    return until


def finish_writers(writers: list[WriterProc], timeout: float) -> None:
    for w in writers:
        code = w.proc.wait(timeout)
        assert code == 0, _tail(w)


def _tail(w: WriterProc) -> str:
    out = w.log.parent / (w.log.stem + ".out")
    return out.read_text()[-3000:] if out.exists() else ""


@dataclass
class Mover:
    namespace: str
    target: str
    proc: subprocess.Popen[bytes]
    log: Path

    def wait(self, timeout: float) -> dict[str, float]:
        code = self.proc.wait(timeout)
        text = self.log.read_text()
        assert code == 0, text[-3000:]
        assert f"moved {self.namespace} " in text, text
        figures = {f"{m.group(1)}_s": float(m.group(2))
                   for m in re.finditer(r"(\w+): done in ([0-9.]+) s", text)}
        freeze = re.search(r"freeze \(frozen to flip\): ([0-9.]+) s", text)
        assert freeze is not None, text
        figures["freeze_s"] = float(freeze.group(1))
        return figures


def start_move(cluster: Cluster, ns: str, target: str, consumer: str, tmp: Path) -> Mover:
    log = tmp / f"move-{target}.log"
    proc = _spawn(["-m", "pathkeeper", "shard", "move", "--consumer", consumer, ns, target],
                  log, PATHKEEPER_DIRECTORY_URL=cluster.directory)
    return Mover(ns, target, proc, log)


@dataclass(eq=False)
class FeedReader(threading.Thread):
    """The traveller's change feed, read from its first cursor on by a client over the
    directory, as the HTTP feed reads it (``copied=True``)."""

    directory: str
    namespace: str
    events: list[tuple[int, str, str | None]] = field(default_factory=list)
    cursor: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def read_once(self, coord: Coordinator) -> int:
        batch, self.cursor = coord.read_events(self.cursor, 1000, namespaces=[self.namespace],
                                               copied=True, wait=1.0)
        self.events += [(e.position, e.type, e.node_id) for e in batch]
        return len(batch)

    def run(self) -> None:
        try:
            with Coordinator.connect(directory_url=self.directory) as coord:
                while not self.stop.is_set():
                    if not self.read_once(coord):
                        time.sleep(0.1)
        except BaseException as exc:
            self.errors.append(exc)


# ------------------------------------------------------------------ reads


def placements(cluster: Cluster) -> dict[str, str]:
    with psycopg.connect(cluster.directory) as conn:
        return dict(conn.execute(b"SELECT namespace, shard FROM placements").fetchall())


def rows_by_namespace(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute(
            b"SELECT namespace, count(*) FROM nodes GROUP BY namespace").fetchall())


def versions_on(url: str, namespaces: list[str]) -> dict[tuple[str, str], int]:
    with psycopg.connect(url) as conn:
        return {(ns, node): v for ns, node, v in conn.execute(
            b"SELECT namespace, id::text, version FROM nodes WHERE namespace = ANY(%s)",
            (namespaces,))}


def last_position(coord: Coordinator) -> int:
    """The end of the log of ``coord``'s one server."""
    with coord.engine.connect() as conn:
        return int(conn.exec_driver_sql(
            "SELECT coalesce(max(position), 0) FROM events").scalar_one())


def check_acknowledged(cluster: Cluster, writers: list[WriterProc]) -> int:
    """(1) Each node's last acknowledged write is there, on the namespace's current shard
    (a later call with an unknown outcome may have changed or deleted it since)."""
    where = placements(cluster)
    last: dict[tuple[str, str], dict[str, Any]] = {}
    unknown_after: set[tuple[str, str]] = set()
    acks = 0
    for w in writers:
        for line in w.lines():
            if "op" not in line:
                continue
            key = (line["ns"], line["node"])
            if line["op"] == "unknown":
                unknown_after.add(key)
                continue
            acks += 1
            last[key] = line
            unknown_after.discard(key)
    current: dict[tuple[str, str], int] = {}
    for shard in SHARDS:
        mine = sorted({ns for ns, _ in last if where[ns] == shard})
        current.update(versions_on(cluster.urls[shard], mine))
    lost: list[tuple[dict[str, Any], int | None]] = []
    for key, line in last.items():
        have = current.get(key)
        if key in unknown_after and have is None:
            continue
        if line["op"] == "delete":
            if have is not None and key not in unknown_after:
                lost.append((line, have))
        elif have is None or have < line["version"]:
            lost.append((line, have))
    assert not lost, f"{len(lost)} acknowledged writes not on their shard, e.g. {lost[:3]}"
    return acks


def throughput(writers: list[WriterProc]) -> float:
    done = [line for w in writers for line in w.lines() if line.get("done")]
    assert len(done) == len(writers)
    return float(sum(d["acks"] / d["seconds"] for d in done))


# ------------------------------------------------------------------ the run


def test_namespaces_over_three_servers_with_moves_and_a_crash(
    cluster: Cluster, es: SearchEngine, es_url: str, alias: str, tmp_path: Path
) -> None:
    form = FORM
    consumer = consumer_for(alias)
    names = [f"n{i:03d}" for i in range(form.namespaces)]
    with Coordinator.connect(directory_url=cluster.directory) as coord:
        for i, ns in enumerate(names):
            coord.create_namespace(ns, shard=SHARDS[i % len(SHARDS)])
        coord.create_namespace(TRAVELLER, shard="default")
        batch = 5000
        for start in range(0, form.nodes, batch):
            coord.import_nodes(TRAVELLER, [
                json.dumps({"path": f"/pre/p{k // 1000}/n{k}", "kind": "file",
                            "content": f"pre {k}"})
                for k in range(start, min(start + batch, form.nodes))])
    groups = [names[i::form.writers] for i in range(form.writers)]
    groups[0].append(TRAVELLER)
    feed = FeedReader(cluster.directory, TRAVELLER)
    workers: list[subprocess.Popen[bytes]] = []
    writers: list[WriterProc] = []
    movers: list[Mover] = []
    try:
        workers += [_spawn(["-m", "pathkeeper", "indexer", "run", "--directory-url",
                            cluster.directory, "--es-url", es_url, "--alias", alias,
                            "--partitions", "2", "--poll-interval", "0.2"],
                           tmp_path / f"worker-{i}.log") for i in range(2)]
        feed.start()
        writers = start_writers(cluster, groups, tmp_path, "shards")
        # The traveller indexed before the load: the first move's wait for the source's
        # indexer (step syncing) then measures the move, not the pre-fill's indexing.
        with Coordinator.connect(cluster.urls["default"]) as default:
            assert default.wait_indexed(last_position(default), 600, consumer=consumer)
        until = run_load(writers, form.seconds)
        time.sleep(2)
        movers.append(start_move(cluster, TRAVELLER, "b", consumer, tmp_path))
        time.sleep(1)
        cluster.kill9(VICTIM)
        time.sleep(3)
        cluster.restart(VICTIM)
        moves = [movers[0].wait(300)]
        movers.append(start_move(cluster, TRAVELLER, "c", consumer, tmp_path))
        moves.append(movers[1].wait(300))
        finish_writers(writers, max(60.0, until - time.time() + 60))
        sharded = throughput(writers)
        assert placements(cluster)[TRAVELLER] == "c"

        # (5) the feed: read to the end, then compared with the traveller's whole log.
        with Coordinator.connect(directory_url=cluster.directory) as coord:
            feed.stop.set()
            feed.join(30)
            assert not feed.errors, feed.errors
            while feed.read_once(coord):
                pass
            whole = FeedReader(cluster.directory, TRAVELLER)
            while whole.read_once(coord):
                pass
        positions = [p for p, _, _ in feed.events]
        assert positions == sorted(set(positions)), "the feed repeated or reordered events"
        assert feed.events == whole.events

        acks = check_acknowledged(cluster, writers)  # (1)

        # (2) and (3): verify per shard, once the workers have caught up.
        coords = [(s, Coordinator.connect(cluster.urls[s])) for s in SHARDS]
        try:
            for _, c in coords:
                assert c.wait_indexed(last_position(c), 120, consumer=consumer)
            reports = verify_shards(
                coords, es, alias=alias,
                settle_for=lambda c: lambda seq: c.wait_indexed(seq, 60, consumer=consumer))
        finally:
            for _, c in coords:
                c.close()
        for r in reports:
            assert r.index.ok, (r.shard, r.index.drift[:5])
            assert not r.index.dead_lettered, (r.shard, r.index.dead_lettered[:5])
            assert r.log is not None and r.log.ok, (r.shard, r.log)
        assert sum(r.index.compared for r in reports) >= form.nodes

        # (4) no namespace with rows on two shards; each on the one the directory names.
        where = placements(cluster)
        held: dict[str, list[str]] = {}
        for shard in SHARDS:
            for ns in rows_by_namespace(cluster.urls[shard]):
                held.setdefault(ns, []).append(shard)
        assert {ns: s for ns, s in held.items() if s != [where.get(ns)]} == {}
        assert set(held) == set(where)

        for w in workers:  # both outlived the crash of a shard they read
            assert w.poll() is None, "an indexer worker died"
        done = [line for w in writers for line in w.lines() if line.get("done")]
        figures: dict[str, Any] = {
            "form": form.__dict__, "acks": acks, "sharded_writes_per_s": round(sharded, 1),
            "frozen_waits": sum(d["frozen"] for d in done),
            "unavailable_waits": sum(d["unavailable"] for d in done),
            "unknown_outcomes": sum(d["unknown"] for d in done),
            "feed_events": len(feed.events),
            # The copy is the subscription's initial sync: steps copying and syncing.
            "copy_rows_per_s": [round(form.nodes / (m["copying_s"] + m["syncing_s"]))
                                for m in moves],
            "moves": moves,
        }
        if FORM is LONG:
            figures["one_server_writes_per_s"] = round(
                one_server_throughput(cluster, form, tmp_path), 1)
        print("\nsimulation figures:", json.dumps(figures))
    finally:
        feed.stop.set()
        for p in [*(w.proc for w in writers), *(m.proc for m in movers), *workers]:
            if p.poll() is None:
                p.kill()
                p.wait(30)


def one_server_throughput(cluster: Cluster, form: Form, tmp_path: Path) -> float:
    """The same workload (writers, namespaces, seconds) with every namespace on one
    server, in the same run: what the three shards are measured against."""
    names = [f"one{i:03d}" for i in range(form.namespaces)]
    with Coordinator.connect(directory_url=cluster.directory) as coord:
        for ns in names:
            coord.create_namespace(ns, shard="default")
    writers = start_writers(cluster, [names[i::form.writers] for i in range(form.writers)],
                            tmp_path, "one")
    try:
        until = run_load(writers, form.seconds)
        finish_writers(writers, until - time.time() + 60)
        return throughput(writers)
    finally:
        for w in writers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(30)
