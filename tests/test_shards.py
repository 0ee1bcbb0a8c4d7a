"""Namespaces over several database servers (docs/sharding.md, sections 1 and 6 step 3):
a directory database names the shards and each namespace's; ``Coordinator`` runs every
call on the namespace's shard, creates by rule or by name, and sees a move (a flip of
the directory's row) by the directory's NOTIFY, or by the old shard's refusal.

Two shards are two databases of the session's cluster (one test puts the second on a
cluster of its own); every assertion reads the shards' tables directly."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from click.testing import CliRunner

with warnings.catch_warnings():  # as tests/http/conftest.py imports it
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

from coordinator import Coordinator
from coordinator.api_keys import create_key
from coordinator.async_statements import AsyncStatements
from coordinator.commands import Mkdir, Rename
from coordinator.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    InvalidConfiguration,
    NamespaceFrozen,
    NotFound,
)
from coordinator.shard_admin import add_shard, check, init_directory
from coordinator.shard_directory import DirectoryMap
from coordinator.shard_map import Shard
from pathkeeper.cli.main import main
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings
from pathkeeper.local.postgres import LocalPostgres

_ids = itertools.count()


@dataclass(frozen=True)
class Shards:
    directory: str
    default: str  # the shard "default"
    b: str  # the shard "b"

    def url(self, shard: str) -> str:
        return self.default if shard == "default" else self.b


def _shards(pg: LocalPostgres, other: LocalPostgres | None = None) -> Shards:
    n = next(_ids)
    default = pg.create_database(f"pk_shard_default_{n}", template="pk_template")
    b = (other or pg).create_database(f"pk_shard_b_{n}", template=None if other else
                                      "pk_template")
    if other is not None:
        from coordinator.migrate import upgrade

        upgrade(b)
    directory = pg.create_database(f"pk_directory_{n}")
    init_directory(directory, default)
    add_shard(directory, "b", b)
    return Shards(directory, default, b)


@pytest.fixture
def shards(pg_cluster: LocalPostgres) -> Shards:
    return _shards(pg_cluster)


@pytest.fixture
def coord(shards: Shards) -> Iterator[Coordinator]:
    with Coordinator.connect(directory_url=shards.directory, lock_timeout=5.0) as c:
        yield c


def _scalar(url: str, sql: str, *args: object) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql.encode(), args).fetchone()
        assert row is not None
        return row[0]


def _namespaces_on(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute(b"SELECT name FROM namespaces ORDER BY name")]


def _nodes_on(url: str, ns: str) -> int:
    return int(_scalar(url, "SELECT count(*) FROM nodes WHERE namespace = %s", ns))  # type: ignore[call-overload]


def _events_on(url: str, ns: str) -> int:
    return int(_scalar(url, "SELECT count(*) FROM events WHERE namespace = %s", ns))  # type: ignore[call-overload]


def _placement(directory: str, ns: str) -> tuple[str, int] | None:
    with psycopg.connect(directory) as conn:
        row = conn.execute(b"SELECT shard, epoch FROM placements WHERE namespace = %s",
                           (ns,)).fetchone()
    return None if row is None else (row[0], row[1])


def _flip(shards: Shards, ns: str, to: str, fence: bool = True) -> None:
    """A move's flip done by hand: the namespace made on ``to`` (as the copy would),
    the old shard's fence row ``gone``, the directory's row pointing at ``to``."""
    with Coordinator.connect(shards.url(to)) as there:
        there.create_namespace(ns)
    source = "b" if to == "default" else "default"
    if fence:
        with psycopg.connect(shards.url(source)) as conn:
            conn.execute(b"INSERT INTO namespace_placement (namespace, state) "
                         b"VALUES (%s, 'gone')", (ns,))
    with psycopg.connect(shards.directory) as conn:
        conn.execute(b"UPDATE placements SET shard = %s, epoch = epoch + 1 "
                     b"WHERE namespace = %s", (to, ns))


def _refuse(url: str, ns: str, sqlstate: str) -> None:
    """The old shard refuses every write of ``ns`` as the fence does (``sqlstate`` PK010:
    not here; PK009: frozen), with nothing written: a trigger on ``nodes``, the table
    every write kind changes, standing in for the fence's check."""
    with psycopg.connect(url) as conn:
        conn.execute(f"""
            CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $fn$
            BEGIN
                IF NEW.namespace = '{ns}' THEN
                    RAISE EXCEPTION USING ERRCODE = '{sqlstate}',
                        MESSAGE = 'namespace {ns} is not on this server';
                END IF;
                RETURN NEW;
            END $fn$;
            CREATE TRIGGER tr_test_refuse BEFORE INSERT OR UPDATE ON nodes
                FOR EACH ROW EXECUTE FUNCTION test_refuse();""".encode())


# ------------------------------------------------------------------ placing


def test_create_places_by_name_and_by_rule(shards: Shards) -> None:
    with Coordinator.connect(directory_url=shards.directory) as coord:
        coord.create_namespace("named", shard="default")
        assert _namespaces_on(shards.default) == ["named"]
        with pytest.raises(InvalidArgument, match="no shard named 'nowhere'"):
            coord.create_namespace("lost", shard="nowhere")
        assert _placement(shards.directory, "lost") is None
        # least_loaded: "default" holds more nodes (its estimate after ANALYZE) ...
        coord.import_nodes("named", [json.dumps({"path": f"/n{i}", "kind": "dir"})
                                     for i in range(200)])
    with psycopg.connect(shards.default, autocommit=True) as conn:
        conn.execute(b"ANALYZE nodes")
    with Coordinator(shard_map=DirectoryMap(shards.directory, load_cache_seconds=0)) as coord:
        coord.create_namespace("ruled")
        assert _placement(shards.directory, "ruled") == ("b", 1)
        assert _namespaces_on(shards.b) == ["ruled"]
        # ... and a shard that takes no new namespaces is never chosen by the rule.
        with psycopg.connect(shards.directory) as conn:
            conn.execute(b"UPDATE shards SET accepts_new = false WHERE name = 'b'")
        coord.shard_map.close()
    with Coordinator(shard_map=DirectoryMap(shards.directory, load_cache_seconds=0)) as coord:
        coord.create_namespace("ruled2")
        assert _placement(shards.directory, "ruled2") == ("default", 1)
    # A rule naming a shard (PATHKEEPER_PLACEMENT=b).
    with Coordinator.connect(directory_url=shards.directory, placement="b") as coord:
        coord.create_namespace("pinned")
        assert _placement(shards.directory, "pinned") == ("b", 1)
        with pytest.raises(AlreadyExists, match="already exists"):
            coord.create_namespace("pinned")
        with pytest.raises(AlreadyExists, match="on shard b"):
            coord.create_namespace("pinned", shard="default")
        assert coord.namespaces() == ["named", "pinned", "ruled", "ruled2"]
    assert _namespaces_on(shards.b) == ["pinned", "ruled"]
    assert _namespaces_on(shards.default) == ["named", "ruled2"]


def test_a_create_that_stopped_halfway_is_listed_and_finished(shards: Shards) -> None:
    """The directory's row is written first: a crash before the shard's create leaves
    it alone; ``shard check`` lists it, and creating the name again finishes it. A
    namespace on a shard with no directory row is listed too."""
    with psycopg.connect(shards.directory) as conn:  # the crash: the row only
        conn.execute(b"INSERT INTO placements (namespace, shard) VALUES ('half', 'b')")
    with Coordinator.connect(shards.b) as b:
        b.create_namespace("stray")
    found = [str(f) for f in check(shards.directory)]
    assert found == [
        "b: namespace 'half' is placed here but absent: a create that stopped halfway "
        "(create it again to finish it, or drop it)",
        "b: namespace 'stray' is here with no directory row",
    ]
    with Coordinator.connect(directory_url=shards.directory) as coord:
        coord.create_namespace("half")
        assert "half" in _namespaces_on(shards.b)
        coord.mkdir("half", "/x")
    with Coordinator.connect(shards.b) as b:
        b.drop_namespace("stray")
    assert check(shards.directory) == []


def test_concurrent_creates_of_one_name_make_it_once(shards: Shards) -> None:
    """Processes racing to create one name (each its own Coordinator and connections): the
    directory's primary key lets one place it, the others find the row and meet the
    shard's; exactly one create succeeds, on one shard."""
    import threading

    outcomes: list[str] = []
    start = threading.Barrier(6)

    def create(i: int) -> None:
        with Coordinator.connect(directory_url=shards.directory) as coord:
            start.wait()
            try:
                coord.create_namespace("race", shard=None if i % 2 else "b")
                outcomes.append("created")
            except AlreadyExists:
                outcomes.append("exists")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["created"] + ["exists"] * 5
    placed = _placement(shards.directory, "race")
    assert placed is not None
    home, away = shards.url(placed[0]), shards.url("b" if placed[0] == "default" else "default")
    assert _namespaces_on(home) == ["race"] and _namespaces_on(away) == []


def test_drop_removes_the_directory_row_after_the_shard_s(shards: Shards,
                                                         coord: Coordinator) -> None:
    coord.create_namespace("gone", shard="b")
    coord.drop_namespace("gone")
    assert _namespaces_on(shards.b) == [] and _placement(shards.directory, "gone") is None
    # A row whose namespace is absent on its shard (a stopped create) goes with a drop.
    with psycopg.connect(shards.directory) as conn:
        conn.execute(b"INSERT INTO placements (namespace, shard) VALUES ('half', 'b')")
    with pytest.raises(Exception, match="half"):
        coord.drop_namespace("half")
    assert _placement(shards.directory, "half") is None


def test_a_drop_through_a_stale_map_leaves_the_moved_namespace_s_row(shards: Shards) -> None:
    """A map that missed a flip sends the drop to the old shard, which no longer has the
    namespace (its move's cleanup ran): NotFound, and the directory's row, which names
    the new shard, stays."""
    with Coordinator(shard_map=DirectoryMap(shards.directory, listen=False)) as coord:
        coord.create_namespace("trav", shard="default")
        coord.mkdir("trav", "/x")  # cached on "default"
        _flip(shards, "trav", "b", fence=False)
        with Coordinator.connect(shards.default) as old:
            old.drop_namespace("trav", force=True)  # the cleanup
        with pytest.raises(NotFound):
            coord.drop_namespace("trav")
    assert _placement(shards.directory, "trav") == ("b", 2)
    assert _namespaces_on(shards.b) == ["trav"]


# ------------------------------------------------------------------ routing


def test_every_call_kind_runs_on_the_namespace_s_shard(shards: Shards,
                                                      coord: Coordinator) -> None:
    coord.create_namespace("left", shard="default")
    coord.create_namespace("right", shard="b")
    for ns in ("left", "right"):
        coord.mkdir(ns, "/d")  # one statement (``single_statement``)
        coord.mkdir(ns, "/p/q", parents=True)  # a unit of work
        coord.create_file(ns, "/d/f", "x")
        coord.rename(ns, "/d", "e")
        coord.apply(ns, [Mkdir("/g1"), Rename("/g1", "g2")])  # a group
        with coord.transaction(ns) as group:
            group.mkdir("/t")
        coord.import_nodes(ns, [json.dumps({"path": "/i/j", "kind": "dir"})])
        node = coord.stat(ns, "/e/f")
        assert coord.get(ns, node.id).path == "/e/f"
        assert [n.name for n in coord.listdir(ns, "/")] == ["e", "g2", "i", "p", "t"]
        assert len(list(coord.walk(ns))) == 9
        events, _ = coord.read_events(namespaces=[ns], wait=0)
        assert {e.namespace for e in events} == {ns} and len(events) == 11
    for ns, home, away in (("left", shards.default, shards.b),
                           ("right", shards.b, shards.default)):
        assert _nodes_on(home, ns) == 9 and _nodes_on(away, ns) == 0
        assert _events_on(home, ns) == 11 and _events_on(away, ns) == 0
    assert coord.namespaces() == ["left", "right"]
    # A log is one server's: read by name, never two at once.
    events, _ = coord.read_events(shard="b", wait=0)
    assert {e.namespace for e in events} == {"right"}
    with pytest.raises(InvalidArgument, match="one database server"):
        coord.read_events(namespaces=["left", "right"], wait=0)
    with pytest.raises(InvalidConfiguration, match="per shard"):
        coord.engine  # noqa: B018 (the server-wide code is per shard with a directory)


def test_the_async_statements_route_to_each_shard_s_pool(shards: Shards,
                                                        coord: Coordinator) -> None:
    coord.create_namespace("left", shard="default")
    coord.create_namespace("right", shard="b")

    async def run() -> None:
        statements = AsyncStatements(None, coord.settings, wake=coord.wake_indexer,
                                     shard_map=coord.shard_map)
        await statements.open()
        try:
            for ns in ("left", "right"):
                statement = statements.statement(ns, Mkdir("/async"))
                assert statement is not None
                await statements.execute(statement)
                assert (await statements.stat(ns, "/async")).path == "/async"
        finally:
            await statements.close()

    asyncio.run(run())
    assert _nodes_on(shards.default, "left") == 2 and _nodes_on(shards.b, "left") == 0
    assert _nodes_on(shards.b, "right") == 2 and _nodes_on(shards.default, "right") == 0


# ---------------------------------------------------------- a stale map


def _wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.02)


def test_a_flip_is_seen_by_the_directory_s_notify(shards: Shards, coord: Coordinator) -> None:
    """The map cached "default"; the flip's NOTIFY drops the entry (no refusal needed),
    and the next write goes to the new shard."""
    coord.create_namespace("trav", shard="default")
    coord.mkdir("trav", "/before")  # cached now
    assert coord.shard_map.placement_of("trav") == (Shard("default", shards.default), 1)  # type: ignore[attr-defined]
    _flip(shards, "trav", "b")
    _wait_for(lambda: coord.shard_map.placement_of("trav")[1] == 2)  # type: ignore[attr-defined]
    coord.mkdir("trav", "/after")
    assert _nodes_on(shards.b, "trav") == 2  # its root and /after
    assert _nodes_on(shards.default, "trav") == 2  # its root and /before, untouched


def test_a_refusal_by_the_old_shard_reroutes_every_write_kind(shards: Shards) -> None:
    """A map that missed the flip (no LISTEN) sends the write to the old shard, which
    refuses it (PK010, simulated by a trigger that refuses as the fence does): the map
    is read again and the call runs once more on the new shard, transparently; a group
    block, which cannot be run again for its caller, gets ``Conflict`` and its next run
    goes to the new shard; the fast path's statements do the same."""
    stale = DirectoryMap(shards.directory, listen=False)
    with Coordinator(shard_map=stale) as coord:
        coord.create_namespace("trav", shard="default")
        coord.mkdir("trav", "/before")
        _flip(shards, "trav", "b", fence=False)
        _refuse(shards.default, "trav", "PK010")
        coord.mkdir("trav", "/lone")  # one statement
        # Each kind from a stale entry again (the directory said "default" before).
        for kind in ("unit", "group", "import", "async"):
            stale._placed["trav"] = (Shard("default", shards.default), 1)
            if kind == "unit":
                coord.mkdir("trav", "/u/v", parents=True)
            elif kind == "group":
                coord.apply("trav", [Mkdir("/g")])
            elif kind == "import":
                coord.import_nodes("trav", [json.dumps({"path": "/imp", "kind": "dir"})])
            else:
                async def run() -> None:
                    statements = AsyncStatements(None, coord.settings, wake=lambda _: None,
                                                 shard_map=stale)
                    await statements.open()
                    try:
                        statement = statements.statement("trav", Mkdir("/async"))
                        assert statement is not None
                        await statements.execute(statement)
                    finally:
                        await statements.close()

                asyncio.run(run())
        stale._placed["trav"] = (Shard("default", shards.default), 1)
        with pytest.raises(Conflict, match="moved"), coord.transaction("trav") as group:
            group.mkdir("/tx")
        with coord.transaction("trav") as group:
            group.mkdir("/tx")
    with psycopg.connect(shards.b) as conn:
        names = sorted(r[0] for r in conn.execute(
            b"SELECT name FROM nodes WHERE namespace = 'trav' AND name <> ''"))
    assert names == ["async", "g", "imp", "lone", "tx", "u", "v"]
    assert _nodes_on(shards.default, "trav") == 2  # nothing written on the old shard


def test_a_frozen_namespace_is_refused_unless_the_directory_flipped(shards: Shards) -> None:
    """PK009 (a move in flight): the directory is read once; it still names the same
    shard, so the caller gets ``NamespaceFrozen`` (HTTP 503 + Retry-After), nothing
    written; other namespaces write on."""
    with Coordinator(shard_map=DirectoryMap(shards.directory, listen=False)) as coord:
        coord.create_namespace("cold", shard="default")
        coord.create_namespace("warm", shard="default")
        _refuse(shards.default, "cold", "PK009")
        with pytest.raises(NamespaceFrozen):
            coord.mkdir("cold", "/x")
        coord.mkdir("warm", "/x")
    assert _nodes_on(shards.default, "cold") == 1


def test_a_stale_map_meets_the_fence_and_is_refreshed(shards: Shards) -> None:
    """The real fence (``pathkeeper_check_placed``, docs/sharding.md section 1): a map that
    missed the flip writes to the old shard, whose ``gone`` row refuses with PK010; the
    write lands on the new shard. (Without the fence the write landed on the old shard.)"""
    with Coordinator(shard_map=DirectoryMap(shards.directory, listen=False)) as coord:
        coord.create_namespace("trav", shard="default")
        coord.mkdir("trav", "/before")
        _flip(shards, "trav", "b")
        coord.mkdir("trav", "/after")
    assert _nodes_on(shards.b, "trav") == 2
    assert _nodes_on(shards.default, "trav") == 2


# ------------------------------------------------------------------ HTTP


def test_http_over_two_shards(shards: Shards) -> None:
    """The app on a directory: keys from the directory, namespaces created by the rule,
    the fast path's statements and the blocking calls on each namespace's shard, the
    feed on its shard's log."""
    settings = ServiceSettings(database_url=None, directory_url=shards.directory,
                               auth_cache_seconds=0.0).with_coordinator(placement="b")
    with Coordinator.connect(directory_url=shards.directory) as admin:
        _, secret = create_key(admin.keys_engine, ["*"], "admin")
        admin.create_namespace("left", shard="default")
    h = {"Authorization": f"Bearer {secret}"}
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/namespaces", json={"name": "right"}, headers=h
                           ).status_code == 201
        for ns in ("left", "right"):
            base = f"/v1/namespaces/{ns}"
            assert client.post(f"{base}/dirs", json={"path": "/d"}, headers=h
                               ).status_code == 201
            assert client.post(f"{base}/node/rename", params={"path": "/d"},
                               json={"name": "e"}, headers=h).status_code == 200
            assert client.post(f"{base}/batch", json={"operations": [
                {"op": "mkdir", "path": "/b1"}]}, headers=h).status_code == 200
            assert client.post(f"{base}/import", content=b'{"path": "/i", "kind": "dir"}\n',
                               headers=h).status_code == 201
            got = client.get(f"{base}/node", params={"path": "/e"}, headers=h)
            assert got.status_code == 200 and got.json()["path"] == "/e"
            feed = client.get(f"{base}/events", params={"wait": 0}, headers=h).json()
            assert {e["namespace"] for e in feed["events"]} == {ns}
            assert len(feed["events"]) == 5
        listed = client.get("/v1/namespaces", headers=h).json()
        assert listed["namespaces"] == ["left", "right"]
        # Readiness asks every shard (the indexer never ran: no lag to report).
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["postgres"] is True, ready.text
    assert _placement(shards.directory, "right") == ("b", 1)
    for ns, home, away in (("left", shards.default, shards.b),
                           ("right", shards.b, shards.default)):
        assert _nodes_on(home, ns) == 4 and _nodes_on(away, ns) == 0


def test_http_answers_503_with_retry_after_for_a_frozen_namespace(shards: Shards) -> None:
    settings = ServiceSettings(database_url=None, directory_url=shards.directory,
                               auth=False)
    with Coordinator.connect(directory_url=shards.directory) as admin:
        admin.create_namespace("cold", shard="b")
    _refuse(shards.b, "cold", "PK009")
    with TestClient(create_app(settings)) as client:
        for path in ("/v1/namespaces/cold/dirs",):
            r = client.post(path, json={"path": "/d"})
            assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
            assert r.json()["error"]["code"] == "namespace_frozen"


# ------------------------------------------------------------ two clusters


def test_two_shards_on_two_clusters(pg_cluster: LocalPostgres) -> None:
    with LocalPostgres() as other:
        shards = _shards(pg_cluster, other)
        with Coordinator.connect(directory_url=shards.directory) as coord:
            coord.create_namespace("here", shard="default")
            coord.create_namespace("there", shard="b")
            coord.mkdir("there", "/x")
            coord.mkdir("here", "/y")
            assert coord.stat("there", "/x").path == "/x"
        assert _namespaces_on(shards.b) == ["there"]
        assert _namespaces_on(shards.default) == ["here"]
        assert _nodes_on(shards.b, "there") == 2


# ------------------------------------------------------------------ CLI


def test_shard_cli_init_add_list_check(pg_cluster: LocalPostgres) -> None:
    n = next(_ids)
    default = pg_cluster.create_database(f"pk_cli_default_{n}", template="pk_template")
    b = pg_cluster.create_database(f"pk_cli_b_{n}", template="pk_template")
    bare = pg_cluster.create_database(f"pk_cli_bare_{n}")
    directory = pg_cluster.create_database(f"pk_cli_directory_{n}")
    with Coordinator.connect(default) as coord:
        coord.create_namespace("docs")
        create_key(coord.engine, ["docs"], "write")
    runner = CliRunner()

    def cli(*args: str, **env: str) -> tuple[int, str]:
        result = runner.invoke(main, list(args), env=env)
        return result.exit_code, result.output

    assert cli("shard", "init", "--directory-url", default, "--database-url", default) == (
        2, "error: the directory's database holds a shard's schema: the directory needs a "
           "database of its own (it may be on the same server)\n")
    assert cli("shard", "init", "--directory-url", directory, "--database-url", default,
               "--store-url", "env:PK_TEST_DEFAULT_URL") == (
        0, "directory made: shard default with 1 namespace(s)\n")
    code, out = cli("shard", "init", "--directory-url", directory, "--database-url", default)
    assert code == 2 and out.startswith("error: the directory has shards already")
    env = {"PATHKEEPER_DIRECTORY_URL": directory, "PK_TEST_DEFAULT_URL": default}
    code, out = cli("shard", "add", "Bad!", b, **env)
    assert code == 2 and out.startswith("error: a shard's name is 1-64 of"), out
    code, out = cli("shard", "add", "bare", bare, **env)
    assert code == 2 and "bare at none" in out and "db upgrade" in out, out
    code, out = cli("shard", "add", "b", b, **env)
    assert code == 0 and out.startswith("added shard b (schema at "), out
    code, out = cli("shard", "add", "b", b, **env)
    assert (code, out) == (2, "error: the directory has a shard named b already\n")
    code, out = cli("shard", "list", **env)
    assert code == 0 and out.splitlines()[0].split() == ["name", "new", "namespaces", "url"]
    assert out.splitlines()[1].split()[:3] == ["b", "yes", "0"]
    assert out.splitlines()[1].endswith(f"@127.0.0.1:{pg_cluster.port}/pk_cli_b_{n}")
    assert out.splitlines()[2].split() == ["default", "yes", "1", "env:PK_TEST_DEFAULT_URL"]
    assert cli("shard", "check", **env) == (0, "the directory and the shards agree\n")
    code, out = cli("ns", "create", "--shard", "b", "atb", **env)
    assert code == 0 and _namespaces_on(b) == ["atb"], out
    assert cli("ns", "list", **env) == (0, "atb\ndocs\n")
    with psycopg.connect(directory) as conn:
        conn.execute(b"INSERT INTO placements (namespace, shard) VALUES ('half', 'b')")
    code, out = cli("shard", "check", **env)
    assert code == 1 and out.startswith("b: namespace 'half' is placed here but absent")
    # The keys moved to the directory: the key made on the server is listed there.
    code, out = cli("keys", "list", **env)
    assert code == 0 and len(out.splitlines()) == 2 and " docs " in out, out
