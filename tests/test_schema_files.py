"""The migrated database equals the files: every server-side function equals its
``coordinator/sql/fn_*.sql`` file and every table, column (with its options and
compression),
constraint, index and sequence equals ``coordinator/sql/schema.sql``; a file changed
without a migration that installs it is caught; each server-side rule is written in one
file; the database itself refuses a name that is not NFC."""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from importlib.resources import files
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory

from coordinator import Coordinator
from coordinator.migrate import alembic_config, downgrade, upgrade
from coordinator.sql import load, schema
from coordinator.sql.functions import FUNCTIONS, digest, install
from pathkeeper.local.postgres import LocalPostgres

_ids = itertools.count()

#: Schemas of ours (``public`` holds the tables, ``pathkeeper_locks`` the lock tables).
_OURS = "n.nspname IN ('public', 'pathkeeper_locks')"

_QUERIES = {
    "schemas": """
        SELECT n.nspname, coalesce(n.nspacl::text, '') FROM pg_namespace n WHERE {ours}
    """,
    "columns": """
        SELECT n.nspname || '.' || c.relname, a.attnum::int, a.attname,
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
               coalesce(obj_description(c.oid, 'pg_class'), ''),
               coalesce(a.attoptions::text, ''), a.attcompression::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
        WHERE {ours} AND c.relkind IN ('r', 'p', 'v', 'm')
          AND c.relname NOT IN ('alembic_version', 'directory_version')
    """,
    "constraints": """
        SELECT n.nspname || '.' || c.conrelid::regclass::text, c.conname,
               pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE {ours} AND c.conrelid <> 0
          AND c.conrelid::regclass::text NOT IN ('alembic_version', 'directory_version')
    """,
    "indexes": """
        SELECT n.nspname || '.' || i.tablename, i.indexname, i.indexdef
        FROM pg_indexes i JOIN pg_namespace n ON n.nspname = i.schemaname
        WHERE {ours} AND i.tablename NOT IN ('alembic_version', 'directory_version')
    """,
    "sequences": """
        SELECT n.nspname || '.' || s.sequencename, s.data_type::text, s.start_value,
               s.min_value, s.max_value, s.increment_by, s.cycle, s.cache_size,
               coalesce((SELECT d.refobjid::regclass::text || '.' || a.attname
                         FROM pg_depend d JOIN pg_attribute a
                              ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                         WHERE d.objid = format('%I.%I', s.schemaname,
                                                s.sequencename)::regclass
                           AND d.deptype = 'a'), '')
        FROM pg_sequences s JOIN pg_namespace n ON n.nspname = s.schemaname
        WHERE {ours}
    """,
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid),
               coalesce(p.proacl::text, '')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE {ours}
    """,
}


def _normalised(value: Any) -> Any:
    """Text with trailing spaces and blank lines dropped (the only liberty taken:
    ``pg_get_functiondef`` gives the body as it was sent)."""
    if not isinstance(value, str):
        return value
    lines = [line.rstrip() for line in value.strip().splitlines()]
    return "\n".join(line for line in lines if line)


def catalog(url: str) -> dict[str, set[tuple[Any, ...]]]:
    """What a database holds of ours, kind by kind, as sets of rows."""
    with psycopg.connect(url) as conn:
        return {
            kind: {tuple(_normalised(v) for v in row)
                   for row in conn.execute(sql.format(ours=_OURS).encode())}
            for kind, sql in _QUERIES.items()
        }


def differences(migrated: dict[str, set[tuple[Any, ...]]],
                from_files: dict[str, set[tuple[Any, ...]]],
                sides: tuple[str, str] = ("the migrated database", "the files")) -> list[str]:
    """Each row one side has and the other lacks, said in a line."""
    out = []
    for kind in _QUERIES:
        for row in sorted(migrated[kind] - from_files[kind], key=repr):
            out.append(f"{kind}: only in {sides[0]}: {row!r}")
        for row in sorted(from_files[kind] - migrated[kind], key=repr):
            out.append(f"{kind}: only in {sides[1]}: {row!r}")
    return out


@pytest.fixture
def migrated_url(pg_cluster: LocalPostgres) -> str:
    """A fresh, empty database migrated to the head here (not a template's copy)."""
    url = pg_cluster.create_database(f"pk_schema_migrated_{next(_ids)}")
    upgrade(url)
    return url


@pytest.fixture
def files_url(pg_cluster: LocalPostgres) -> Iterator[str]:
    """A fresh database built from ``schema.sql`` and the function files only."""
    url = pg_cluster.create_database(f"pk_schema_files_{next(_ids)}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(schema("server").encode())
        install(lambda sql: conn.execute(sql.encode()))
    yield url


def test_the_migrated_database_equals_the_files(migrated_url: str, files_url: str) -> None:
    migrated, from_files = catalog(migrated_url), catalog(files_url)
    assert differences(migrated, from_files) == []
    # Not vacuous: every kind was read, and every function of ours has its file.
    assert all(migrated[kind] for kind in _QUERIES)
    names = {row[0].split("(")[0].split(".")[-1] for row in migrated["functions"]}
    assert len(names) == len(FUNCTIONS)


def test_the_comparison_sees_a_drift(migrated_url: str, files_url: str) -> None:
    """A function body, a constraint and an index that differ are each reported."""
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute(load("fn_check_version").replace(
            "version is %s, expected %s", "version %s, not %s").encode())
        conn.execute(b"ALTER TABLE nodes DROP CONSTRAINT ck_nodes_version")
        conn.execute(b"CREATE INDEX ix_stray ON events (type)")
    found = differences(catalog(migrated_url), catalog(files_url))
    assert [line.split(":")[0] for line in found] == [
        "constraints", "indexes", "functions", "functions"], found
    assert any("pathkeeper_check_version" in line for line in found)


def test_every_function_file_is_installed() -> None:
    shipped = {p.name.removesuffix(".sql")
               for p in files("coordinator.sql").iterdir() if p.name.startswith("fn_")}
    assert shipped == set(FUNCTIONS)


def test_every_function_is_installed_after_the_helpers_it_calls() -> None:
    """``FUNCTIONS`` is read from the folder: each file comes after every file whose
    function it calls, ties in name order, so installation is the same every time."""
    defined = {name: re.search(r"CREATE OR REPLACE FUNCTION ([\w.]+)\(", load(name))
               for name in FUNCTIONS}
    where = {m.group(1): name for name, m in defined.items() if m is not None}
    assert len(where) == len(FUNCTIONS)
    for i, name in enumerate(FUNCTIONS):
        body = re.sub(r"--[^\n]*", "", load(name))
        called = {where[f] for f in re.findall(r"([\w.]+)\(", body)
                  if f in where and where[f] != name}
        assert called <= set(FUNCTIONS[:i]), (name, called - set(FUNCTIONS[:i]))
    assert FUNCTIONS.index("fn_check_depth") < FUNCTIONS.index("fn_move")


def test_the_newest_function_migration_names_the_files_as_they_are() -> None:
    """A database at the head never runs an old migration again: a function file changed
    without a new migration that installs it would reach fresh databases only."""
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused/x"))
    newest = next(rev for rev in script.walk_revisions()
                  if hasattr(rev.module, "FUNCTIONS_DIGEST"))
    assert newest.module.FUNCTIONS_DIGEST == digest(), (
        f"a function file changed since {newest.revision} installed them: add a migration "
        f"that calls coordinator.sql.functions.install with FUNCTIONS_DIGEST = "
        f"{digest()!r}")


# Each rule's wording or statement, and the one file it may be written in.
_RULES = {
    r"version is %s, expected %s": "fn_check_version",
    r"does not exist": "fn_walk_path",
    r"is a file": "fn_walk_path",
    r"no namespace": "fn_walk_path",
    r"already exists": "fn_check_name_free",
    r"no node with id": "fn_lock",
    r"kept changing while it was being locked": "fn_lock",
    r"pathkeeper_resolve\(p_ns": "fn_walk_path|fn_lock",
    r"FOR (NO KEY )?UPDATE": "fn_lock",
    r"would put nodes deeper than": "fn_check_depth",
    r"s\.depth <= ": "fn_subtree_extent",
    r"is being moved": "fn_check_placed",
    r"is not on this server": "fn_check_placed|fn_freeze_namespace",
    r"pg_advisory_xact_lock_shared": "fn_check_placed",
    r"'frozen', l_s \+ 65535": "fn_freeze_namespace",
}


@pytest.mark.parametrize("pattern", sorted(_RULES))
def test_each_rule_is_written_in_one_file(pattern: str) -> None:
    where = {name for name in FUNCTIONS
             if re.search(pattern, re.sub(r"--[^\n]*", "", load(name)))}
    assert where == set(_RULES[pattern].split("|")), (pattern, where)


def test_a_name_not_nfc_is_refused_by_the_database(database_url: str) -> None:
    """Whoever writes the row, by hand included: the decomposed spelling of a name is
    refused by the CHECK constraint; the composed one is stored."""
    from coordinator import Coordinator

    with Coordinator.connect(database_url) as coord:
        coord.create_namespace("t")
    with psycopg.connect(database_url) as conn:
        root = conn.execute(b"SELECT id FROM nodes WHERE namespace = 't'").fetchone()
        assert root is not None
        insert = ("INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                  "VALUES ('t', gen_random_uuid(), %s, %s, 'dir')")
        with pytest.raises(psycopg.errors.CheckViolation) as info:
            conn.execute(insert.encode(), (root[0], "cafe\u0301"))
        assert info.value.diag.constraint_name == "ck_nodes_name_valid"
        conn.rollback()
        conn.execute(insert.encode(), (root[0], "caf\u00e9"))


def test_downgrading_0011_brings_back_the_frozen_functions(pg_cluster: LocalPostgres) -> None:
    """Below 0011 the database is what 0010 built: the frozen bodies of 0004-0009, no
    helpers, the name rule without NFC (functions, constraints and all compared)."""
    before = pg_cluster.create_database(f"pk_schema_0010_{next(_ids)}")
    upgrade(before, "0010_position_lock_tables")
    round_trip = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(round_trip)
    downgrade(round_trip, "0010_position_lock_tables")
    assert differences(catalog(round_trip), catalog(before),
                       ("the downgraded database", "the one migrated to 0010")) == []


def _functions_apart(down: str, files_url: str) -> tuple[list[str], list[tuple[str, str]]]:
    """How the functions of the database ``down`` differ from the files': the lines of
    ``differences``, and (side, function name) for each, sorted."""
    found = [line for line in differences(catalog(down), catalog(files_url),
                                          ("the downgraded database", "the files"))
             if line.startswith("functions: ")]
    return found, sorted((line.split(": ")[1], line.split("('")[1].split("(")[0])
                         for line in found)


#: The functions whose UPDATE 0017 changed: below it, each differs from its file.
_UPDATES_OF_0017 = ("pathkeeper_move", "pathkeeper_rename", "pathkeeper_set_metadata",
                    "pathkeeper_write")


def _definitions(url: str, names: Sequence[str]) -> dict[str, str]:
    """The definition of each function of ``names`` in the database at ``url``."""
    found: dict[str, str] = {}
    with psycopg.connect(url) as conn:
        for name in names:
            row = conn.execute(b"SELECT pg_get_functiondef(%s::regproc)", (name,)).fetchone()
            assert row is not None, name
            found[name] = str(row[0])
    return found


#: The functions whose subtree walk 0019 changed: below it, each differs from its file.
_WALKS_OF_0019 = ("pathkeeper_copy", "pathkeeper_delete", "pathkeeper_move",
                  "pathkeeper_subtree_extent")


def _with_later(changed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``changed`` (the differences a downgrade below 0017 leaves from the files, for
    the functions that revision's downgrade is about) with those of the downgrades of
    0017 and 0019 on the way: their functions on both sides, each of 0019's unless
    ``changed`` names it already (below 0012 there is no copy at all)."""
    named = {name for _, name in changed}
    later = [*_UPDATES_OF_0017, *(n for n in _WALKS_OF_0019 if n not in named)]
    return sorted({*changed, *((side, name) for name in later
                               for side in ("only in the downgraded database",
                                            "only in the files"))})


def test_downgrading_0018_leaves_the_namespace_estimate_to_analyze(pg_cluster: LocalPostgres,
                                                                   files_url: str) -> None:
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0017_update_by_id_index")
    apart = [line for line in differences(catalog(down), catalog(files_url))
             if not line.startswith("functions: ") and not _lz4_of_0020(line)]
    assert apart == [
        "columns: only in the migrated database: ('public.nodes', 1, 'namespace', "
        "'character varying(128)', True, '', '', '', '')",
        "columns: only in the files: ('public.nodes', 1, 'namespace', "
        "'character varying(128)', True, '', '', '{n_distinct=-0.001}', '')"]
    upgrade(down)
    assert differences(catalog(down), catalog(files_url)) == []


def test_0018_analyzes_statistics_taken_with_rows(pg_cluster: LocalPostgres) -> None:
    """A deployed table analyzed while each namespace held its root alone: the migration
    replaces ANALYZE's estimate (unique) at once, not at autovacuum's next analyze."""
    url = pg_cluster.create_database(f"pk_schema_up_{next(_ids)}")
    upgrade(url, "0017_update_by_id_index")
    estimate = ("SELECT n_distinct FROM pg_stats WHERE tablename = 'nodes'"
                " AND attname = 'namespace'")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("""
            WITH r AS (SELECT 'tenant' || k AS ns, gen_random_uuid() AS id
                       FROM generate_series(1, 60) k),
                 n AS (INSERT INTO namespaces (name, root_id) SELECT ns, id FROM r)
            INSERT INTO nodes (namespace, id, name, kind) SELECT ns, id, '', 'dir' FROM r
        """)
        conn.execute("ANALYZE nodes")
        assert conn.execute(estimate).fetchone() == (-1.0,)  # taken for unique
    upgrade(url)
    with psycopg.connect(url) as conn:
        assert conn.execute(estimate).fetchone() == (-0.001,)


def test_downgrading_0019_brings_back_the_walks_of_0018(pg_cluster: LocalPostgres,
                                                       files_url: str) -> None:
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0018_namespace_distinct_estimate")
    found, changed = _functions_apart(down, files_url)
    assert changed == sorted((side, name) for name in _WALKS_OF_0019 for side in (
        "only in the downgraded database", "only in the files")), found
    for name, body in _definitions(down, _WALKS_OF_0019).items():
        assert re.search(r"x\.namespace = [su]\.namespace", body) is None, name
    assert [line for line in differences(catalog(down), catalog(files_url))
            if not line.startswith("functions: ") and not _lz4_of_0020(line)] == []
    upgrade(down)
    assert differences(catalog(down), catalog(files_url)) == []


#: The columns 0020 compresses with lz4, (table, column); below it, the server's default.
_LZ4_OF_0020 = (("public.nodes", "content"), ("public.events", "payload"),
                ("public.log_snapshot_nodes", "content"))


def _lz4_of_0020(line: str) -> bool:
    """Whether ``line`` (of ``differences``) is about a column 0020 compresses."""
    return line.startswith("columns: ") and any(
        f"('{table}', " in line and f", '{column}', " in line for table, column in _LZ4_OF_0020)


def test_downgrading_0020_leaves_compression_to_the_server(pg_cluster: LocalPostgres,
                                                          files_url: str) -> None:
    """Below 0020 the three columns use the server's default (pglz); a value stored then
    keeps it after the upgrade and reads back the same, and one stored after is lz4, in
    the node's row and in its event, an imported file's too (staged, then copied)."""
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0019_walks_by_row_namespace")
    apart = differences(catalog(down), catalog(files_url))
    assert len(apart) == 6 and all(_lz4_of_0020(line) for line in apart), apart
    assert sorted(line.rsplit(", ", 1)[1] for line in apart) == ["'')"] * 3 + ["'l')"] * 3
    body = " ".join(f"word{i % 97}" for i in range(20_000))  # compressible, 137 KB
    compression = """
        SELECT pg_column_compression(n.content), pg_column_compression(e.payload), n.content
        FROM nodes n JOIN events e ON e.namespace = n.namespace AND e.node_id = n.id
        WHERE n.namespace = 'c' AND n.name = %s"""
    with Coordinator.connect(down, notify=False) as coord:
        coord.create_namespace("c")
        coord.create_file("c", "/before", body)
        upgrade(down)
        assert differences(catalog(down), catalog(files_url)) == []
        coord.create_file("c", "/after", body)
        line = json.dumps({"path": "/imported", "kind": "file", "content": body})
        assert coord.import_nodes("c", io.StringIO(line + "\n")).created == 1
    with psycopg.connect(down) as conn:
        assert conn.execute(compression, ("before",)).fetchone() == ("pglz", "pglz", body)
        assert conn.execute(compression, ("after",)).fetchone() == ("lz4", "lz4", body)
        assert conn.execute(compression, ("imported",)).fetchone() == ("lz4", "lz4", body)


def test_downgrading_0017_brings_back_the_updates_of_0016(pg_cluster: LocalPostgres,
                                                          files_url: str) -> None:
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0016_merge_metadata_function")
    found, changed = _functions_apart(down, files_url)
    assert changed == _with_later([]), found
    for name, body in _definitions(down, _UPDATES_OF_0017).items():
        assert "(x.namespace, x.id) >= (p_ns, r.id)" not in body, name
    upgrade(down)
    assert differences(catalog(down), catalog(files_url))[:1] == []


def test_downgrading_0016_drops_the_merge_and_nothing_else(pg_cluster: LocalPostgres,
                                                         files_url: str) -> None:
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0015_shard_fence")
    found, changed = _functions_apart(down, files_url)
    assert changed == _with_later([("only in the files", "pathkeeper_merge_metadata")]), found


def test_downgrading_0012_brings_back_the_functions_of_0011(pg_cluster: LocalPostgres,
                                                           files_url: str) -> None:
    """Below 0012 the functions are 0011's: no copy, no depth helpers, and the move with
    its own depth walk (0012 keeps that body frozen, since 0011 installs the files as
    they are now), the lock as it was before 0013 (0013 keeps that body frozen), no
    shard fence and the create without it (0015 keeps that body frozen), no merge (0016
    drops it); every other function is the head's. (Tables are compared by the 0010 test.)"""
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0011_functions_from_files")
    found, changed = _functions_apart(down, files_url)
    assert changed == _with_later([("only in the downgraded database", "pathkeeper_create"),
                       ("only in the downgraded database", "pathkeeper_lock"),
                       ("only in the downgraded database", "pathkeeper_move"),
                       ("only in the files", "pathkeeper_check_depth"),
                       ("only in the files", "pathkeeper_check_placed"),
                       ("only in the files", "pathkeeper_copy"),
                       ("only in the files", "pathkeeper_create"),
                       ("only in the files", "pathkeeper_freeze_namespace"),
                       ("only in the files", "pathkeeper_lock"),
                       ("only in the files", "pathkeeper_merge_metadata"),
                       ("only in the files", "pathkeeper_move"),
                       ("only in the files", "pathkeeper_subtree_extent"),
                       ("only in the files", "pathkeeper_unfreeze_namespace")]), found
    with psycopg.connect(down) as conn:
        row = conn.execute(b"SELECT pg_get_functiondef('pathkeeper_move'::regproc)"
                           ).fetchone()
    assert row is not None and "would put nodes deeper than" in row[0]
    assert "pathkeeper_check_depth" not in row[0]


def test_downgrading_0015_takes_the_fence_out(pg_cluster: LocalPostgres,
                                             files_url: str) -> None:
    """Below 0015 there is no shard fence: the lock and the create as 0013 left them
    (0015 keeps those bodies frozen), no check, freeze or unfreeze; every other function
    is the head's, and the tables are 0014's. (A database migrated to 0014 alone cannot
    be the reference for functions: 0011 and 0013 install the files as they are now.)"""
    before = pg_cluster.create_database(f"pk_schema_0014_{next(_ids)}")
    upgrade(before, "0014_namespace_placement")
    down = pg_cluster.create_database(f"pk_schema_down_{next(_ids)}")
    upgrade(down)
    downgrade(down, "0014_namespace_placement")
    tables = [line for line in differences(catalog(down), catalog(before))
              if not line.startswith("functions: ")]
    assert tables == []
    found, changed = _functions_apart(down, files_url)
    assert changed == _with_later([("only in the downgraded database", "pathkeeper_create"),
                       ("only in the downgraded database", "pathkeeper_lock"),
                       ("only in the files", "pathkeeper_check_placed"),
                       ("only in the files", "pathkeeper_create"),
                       ("only in the files", "pathkeeper_freeze_namespace"),
                       ("only in the files", "pathkeeper_lock"),
                       ("only in the files", "pathkeeper_merge_metadata"),
                       ("only in the files", "pathkeeper_unfreeze_namespace")]), found
    with psycopg.connect(down) as conn:
        for name in ("pathkeeper_lock", "pathkeeper_create"):
            row = conn.execute(f"SELECT pg_get_functiondef('{name}'::regproc)".encode()
                               ).fetchone()
            assert row is not None and "pathkeeper_check_placed" not in row[0], name
    upgrade(down)  # and back up: the fence again
    assert differences(catalog(down), catalog(files_url))[:1] == []
