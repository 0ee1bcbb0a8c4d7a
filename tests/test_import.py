"""Issue 15: bulk import of JSON Lines (``Coordinator.import_nodes``, ``pathkeeper import``).

Against the real PostgreSQL of ``conftest.py``: the import's rows and events are
checked against the table (tree shape, both folds of the log: the tests' own strict
fold and the indexer's), bad input against "nothing written", and concurrency with
real threads on their own connections.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from reliability.dbcheck import (
    counts,
    fold_log,
    setfold_rows,
    table_rows,
    tree_violations,
)
from sqlalchemy import text

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    InvalidContent,
    InvalidImport,
    InvalidName,
    NotADirectory,
    NotFound,
    TooLarge,
    Unavailable,
)
from coordinator.event_appender import POSITION_LOCK_SQL
from coordinator.events import VERSION_KEY, Created, decode
from coordinator.importer import LineTooLong, contiguous_run, iter_lines
from coordinator.results import POSITION_BLOCK
from pathkeeper.cli.main import main as cli_main


def jl(*objs: dict[str, Any]) -> list[str]:
    return [json.dumps(o, ensure_ascii=False) for o in objs]


def check_log_explains_table(coord: Coordinator, ns: str) -> None:
    """The stored tree is valid and both folds of the log rebuild it exactly."""
    assert tree_violations(coord.engine, ns) == []
    fold, _events = fold_log(coord)  # strict: payload paths must be the real paths
    stored = table_rows(coord.engine, ns)
    assert fold.trees[ns].rows() == stored
    assert setfold_rows(coord.engine, ns) == stored


def paths_of(coord: Coordinator, ns: str) -> dict[str, tuple[str, str | None]]:
    return {n.path: (n.kind, n.content) for n in coord.walk(ns)}


# ------------------------------------------------------------------ semantics


def test_import_into_empty_namespace_creates_missing_parents_in_any_order(
    coord: Coordinator, ns: str
) -> None:
    lines = jl(
        {"path": "/a/b/c.txt", "kind": "file", "content": "hello", "metadata": {"k": [1, "x"]}},
        {"path": "/z", "kind": "dir"},
        {"path": "/a", "kind": "dir", "metadata": {"owner": "me"}},
        {"path": "/a/b/d/e.txt", "kind": "file"},
        {"path": "/caf\u0065\u0301", "kind": "file", "content": "nfd name"},
    )
    result = coord.import_nodes(ns, lines)
    # /a/b and /a/b/d are implied
    assert (result.lines, result.created, result.implied_dirs) == (5, 7, 2)
    assert result.first_seq is not None and result.last_seq == result.first_seq + 6
    tree = paths_of(coord, ns)
    assert tree == {
        "/": ("dir", None), "/a": ("dir", None), "/a/b": ("dir", None),
        "/a/b/c.txt": ("file", "hello"), "/a/b/d": ("dir", None),
        "/a/b/d/e.txt": ("file", ""), "/z": ("dir", None), "/caf\u00e9": ("file", "nfd name"),
    }
    assert coord.stat(ns, "/a").metadata == {"owner": "me"}
    assert coord.stat(ns, "/a/b/c.txt").metadata == {"k": [1, "x"]}
    assert coord.stat(ns, "/a/b/c.txt").version == 1
    check_log_explains_table(coord, ns)
    # The node is a normal node: rename, write, delete work on it.
    coord.rename(ns, "/a/b", "bb")
    coord.write_file(ns, "/a/bb/c.txt", "new", if_version=1)
    coord.delete(ns, "/a", recursive=True)
    check_log_explains_table(coord, ns)


def test_imported_events_decode_as_created_events_of_the_current_version(
    coord: Coordinator, ns: str
) -> None:
    """The importer builds its payloads in SQL: they must be what ``coordinator.events``
    defines, decoded by the one ``decode``, equal to what a create would have written."""
    result = coord.import_nodes(ns, jl(
        {"path": "/d/f", "kind": "file", "content": "x", "metadata": {"m": [1]}},
        {"path": "/e", "kind": "dir"},
    ))
    events, _ = coord.read_events(after=(result.first_seq or 1) - 1, namespaces=[ns])
    assert len(events) == result.created == 3
    by_path = {n.path: n for n in coord.walk(ns)}
    for e in events:
        assert e.payload[VERSION_KEY] == Created.VERSION
        change = decode(e.type, e.node_id, e.payload)
        assert change == e.change
        node = by_path[change.path] if isinstance(change, Created) else None
        assert node is not None, change
        assert change == Created(
            id=node.id, parent_id=str(node.parent_id), name=node.name, kind=node.kind,
            path=node.path, content=node.content, metadata=node.metadata, version=1,
        )
        assert e.node_id == node.id


def test_import_into_non_empty_namespace_reuses_existing_directories(
    coord: Coordinator, ns: str
) -> None:
    coord.mkdir(ns, "/home/ann", parents=True)
    coord.create_file(ns, "/home/ann/old.txt", "old")
    result = coord.import_nodes(
        ns, jl({"path": "/home/ann/new.txt", "kind": "file", "content": "n"},
               {"path": "/home/bob/x/y", "kind": "dir"})
    )
    assert (result.created, result.implied_dirs) == (4, 2)  # bob, bob/x
    assert set(paths_of(coord, ns)) == {
        "/", "/home", "/home/ann", "/home/ann/old.txt", "/home/ann/new.txt",
        "/home/bob", "/home/bob/x", "/home/bob/x/y",
    }
    check_log_explains_table(coord, ns)


def test_empty_input_and_blank_lines(coord: Coordinator, ns: str) -> None:
    result = coord.import_nodes(ns, [])
    assert (result.created, result.first_seq, result.last_seq) == (0, None, None)
    result = coord.import_nodes(ns, ["", '{"path": "/f", "kind": "file"}', "   ", ""])
    assert result.created == 1
    assert counts(coord.engine, ns) == (2, 2)


def test_bytes_and_a_stream_of_chunks(coord: Coordinator, ns: str) -> None:
    body = "\n".join(jl(*({"path": f"/d/f{i}", "kind": "file", "content": "é" * i}
                          for i in range(50)))).encode()
    chunks = [body[i:i + 7] for i in range(0, len(body), 7)]  # lines cut anywhere, é too
    result = coord.import_nodes(ns, iter_lines(iter(chunks)))
    assert result.created == 51
    assert coord.stat(ns, "/d/f49").content == "é" * 49
    check_log_explains_table(coord, ns)


# ------------------------------------------------------------------ bad input


def assert_refused(coord: Coordinator, ns: str, before: tuple[int, int]) -> None:
    assert counts(coord.engine, ns) == before


@pytest.mark.parametrize(
    ("line", "error", "says"),
    [
        ("{not json", InvalidImport, "not valid JSON"),
        ('["a"]', InvalidImport, "not a JSON object"),
        ('{"kind": "dir"}', InvalidImport, "no 'path'"),
        ('{"path": "/x", "kind": "dir", "colour": 1}', InvalidImport, "unknown field"),
        ('{"path": "/x", "kind": "link"}', InvalidImport, "'kind' must be"),
        ('{"path": "/x", "kind": "dir", "content": "c"}', InvalidImport, "no content"),
        ('{"path": "/", "kind": "dir"}', InvalidImport, "root"),
        ('{"path": "x", "kind": "dir"}', InvalidName, "not absolute"),
        ('{"path": "/a/../b", "kind": "dir"}', InvalidName, "reserved"),
        ('{"path": "/a/\\u0007", "kind": "dir"}', InvalidName, "control character"),
        ('{"path": "/a//b", "kind": "dir"}', InvalidName, "empty component"),
        ('{"path": "/' + "n" * 256 + '", "kind": "dir"}', InvalidName, "255 bytes"),
        ('{"path": "/f", "kind": "file", "content": 3}', InvalidContent, "must be a string"),
        ('{"path": "/f", "kind": "file", "content": "a\\u0000"}', InvalidContent, "NUL"),
        ('{"path": "/f", "kind": "file", "metadata": [1]}', InvalidContent, "JSON object"),
        (b'{"path": "/\xff", "kind": "dir"}', InvalidImport, "UTF-8"),
        # The metadata rule of create and set_metadata: past it, and past what a
        # recursive parser can take at all.
        ('{"path": "/d", "kind": "dir", "metadata": ' + '{"a": ' * 100 + "{}" + "}" * 100
         + "}", InvalidContent, "nested deeper than 100 levels"),
        ('{"path": "/d", "kind": "dir", "metadata": ' + '{"a": ' * 2000 + "{}" + "}" * 2000
         + "}", InvalidContent, "JSON nested deeper than 100 levels"),
        ('{"path": "/f", "kind": "file", "content": ' + "[" * 2000 + "]" * 2000 + "}",
         InvalidContent, "JSON nested deeper than 100 levels"),
    ],
)
def test_a_bad_line_is_reported_with_its_number_and_nothing_is_written(
    coord: Coordinator, ns: str, line: str | bytes, error: type[Exception], says: str
) -> None:
    before = counts(coord.engine, ns)
    good = '{"path": "/ok", "kind": "dir"}'
    source: list[str | bytes] = [good, good.replace("ok", "ok2"), line, good.replace("ok", "k3")]
    with pytest.raises(error) as info:
        coord.import_nodes(ns, source)
    assert "line 3: " in str(info.value) and says in str(info.value)
    assert info.value.lines[0][0] == 3  # type: ignore[attr-defined]
    assert_refused(coord, ns, before)


def test_every_bad_line_is_reported_not_only_the_first(coord: Coordinator, ns: str) -> None:
    lines = ['{"path": "/ok", "kind": "dir"}'] + ["{bad"] * 30 + ['{"path": "/x"}']
    with pytest.raises(InvalidImport) as info:
        coord.import_nodes(ns, lines)
    message = str(info.value)
    assert "31 bad lines" in message and "line 2: " in message and "(and 11 more)" in message
    assert len(info.value.lines) == 20
    assert_refused(coord, ns, (1, 1))


def test_a_path_twice_names_both_lines(coord: Coordinator, ns: str) -> None:
    lines = jl({"path": "/a", "kind": "dir"}, {"path": "/b", "kind": "file"},
               {"path": "/a", "kind": "file"}, {"path": "/caf\u00e9", "kind": "dir"},
               {"path": "/cafe\u0301", "kind": "dir"})  # the same name once normalized
    with pytest.raises(InvalidImport) as info:
        coord.import_nodes(ns, lines)
    assert info.value.lines == (
        (1, "/a appears again on line(s) 3"), (4, "/caf\u00e9 appears again on line(s) 5"),
    )
    assert_refused(coord, ns, (1, 1))


def test_a_file_under_a_file_in_the_input(coord: Coordinator, ns: str) -> None:
    lines = jl({"path": "/f", "kind": "file"}, {"path": "/d", "kind": "dir"},
               {"path": "/f/x/y", "kind": "file"})
    with pytest.raises(NotADirectory) as info:
        coord.import_nodes(ns, lines)
    assert info.value.lines == ((3, "/f is a file (line 1)"),)
    assert_refused(coord, ns, (1, 1))


def test_an_existing_path_or_a_file_on_the_way_is_an_error_naming_its_line(
    coord: Coordinator, ns: str
) -> None:
    coord.mkdir(ns, "/d")
    coord.create_file(ns, "/d/f", "x")
    before = counts(coord.engine, ns)
    with pytest.raises(AlreadyExists) as info:
        coord.import_nodes(ns, jl({"path": "/d/new", "kind": "dir"},
                                  {"path": "/d", "kind": "dir"}))
    assert info.value.lines == ((2, "/d already exists"),)
    with pytest.raises(AlreadyExists) as info:
        coord.import_nodes(ns, jl({"path": "/d/f", "kind": "file"}))
    assert info.value.lines == ((1, "/d/f already exists"),)
    with pytest.raises(NotADirectory) as info:
        coord.import_nodes(ns, jl({"path": "/e", "kind": "dir"},
                                  {"path": "/d/f/g/h", "kind": "file"}))
    assert info.value.lines == ((2, "/d/f is a file"),)
    assert_refused(coord, ns, before)


def test_missing_namespace(coord: Coordinator) -> None:
    with pytest.raises(NotFound):
        coord.import_nodes("nope", jl({"path": "/a", "kind": "dir"}))


def test_too_deep(coord: Coordinator, ns: str) -> None:
    deep = "/" + "/".join(["d"] * 257)
    with pytest.raises(InvalidName, match="deeper than 256"):
        coord.import_nodes(ns, jl({"path": deep, "kind": "dir"}))


# ------------------------------------------------------------------ long lines


def body_chunks(body: bytes, size: int) -> Iterator[bytes]:
    return (body[i:i + size] for i in range(0, len(body), size))


def test_a_line_longer_than_the_limit_is_refused_with_its_number(
    database_url: str, coord: Coordinator, ns: str
) -> None:
    """The line limit holds for every kind of source: lines given whole (each checked,
    every bad line reported), a stream of chunks and a binary file (read in chunks:
    reading stops at the long line, which is never held whole)."""
    fits = json.dumps({"path": "/fits", "kind": "file", "content": "y" * 950})
    long = json.dumps({"path": "/big", "kind": "file", "content": "x" * 1000})
    lines = ['{"path": "/ok", "kind": "dir"}', long, "{bad"]
    body = "\n".join(lines).encode()
    with Coordinator.connect(database_url, max_import_line_bytes=1000) as small:
        with pytest.raises(TooLarge) as info:
            small.import_nodes(ns, lines)
        assert info.value.lines[0] == (2, "longer than 1,000 bytes (the import's line limit)")
        assert info.value.lines[1][0] == 3 and "not valid JSON" in info.value.lines[1][1]
        assert "line 2: longer than 1,000 bytes" in str(info.value)
        for source in (iter_lines(body_chunks(body, 100), 1000), io.BytesIO(body)):
            with pytest.raises(TooLarge) as info:
                small.import_nodes(ns, source)
            assert [n for n, _ in info.value.lines] == [2]
        assert_refused(coord, ns, (1, 1))
        assert len(fits) <= 1000
        assert small.import_nodes(ns, io.BytesIO(fits.encode() + b"\n")).created == 1


def test_an_endless_line_is_refused_once_past_the_limit(
    database_url: str, coord: Coordinator, ns: str
) -> None:
    """A line that never ends (no newline, ever) is refused once it passes the limit:
    the reader holds at most the limit and one chunk of it, from a stream of chunks as
    from a binary file."""
    read = 0
    head = b'{"path": "/ok", "kind": "dir"}\n{"path": "/f", "kind": "file", "content": "'

    def endless() -> Iterator[bytes]:
        nonlocal read
        yield head
        while True:
            read += 65536
            yield b"x" * 65536

    with pytest.raises(LineTooLong) as info:
        for _ in iter_lines(endless(), max_line_bytes=1 << 20):
            pass
    assert info.value.line == 2 and read <= (1 << 20) + 65536

    class EndlessFile(io.RawIOBase):
        def __init__(self) -> None:
            self.given = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            data = head if self.given == 0 else b"x" * len(buffer)
            n = min(len(data), len(buffer))
            buffer[:n] = data[:n]
            self.given += n
            return n

    endless_file = EndlessFile()
    with Coordinator.connect(database_url, max_import_line_bytes=1 << 20) as small:
        with pytest.raises(TooLarge) as refused:
            small.import_nodes(ns, endless_file)
    assert [n for n, _ in refused.value.lines] == [2]
    assert endless_file.given <= (1 << 20) + (1 << 17)
    assert_refused(coord, ns, (1, 1))


def test_a_long_line_from_many_chunks_is_assembled_whole(coord: Coordinator, ns: str) -> None:
    content = "".join(chr(0x61 + i % 26) for i in range(3 * 1024 * 1024))
    body = (json.dumps({"path": "/big", "kind": "file", "content": content}) + "\n"
            + '{"path": "/after", "kind": "dir"}').encode()
    assert coord.import_nodes(ns, iter_lines(body_chunks(body, 65536))).created == 2
    assert coord.stat(ns, "/big").content == content


# ------------------------------------------------------------------ timeouts


def slow(lines: list[str], pause: float) -> Iterator[str]:
    for line in lines:
        time.sleep(pause)
        yield line


def test_an_import_has_a_timeout_of_its_own(database_url: str, coord: Coordinator,
                                            ns: str) -> None:
    """On a session with a short statement timeout (the HTTP service's), an import
    whose input arrives slowly runs under its own timeout, not the session's; past
    either, it is ``Unavailable`` saying so (never the driver's raw error), and nothing
    is written."""
    lines = jl(*({"path": f"/s/f{i}", "kind": "file"} for i in range(5)))
    with Coordinator.connect(database_url, statement_timeout=0.5) as service:
        with pytest.raises(Unavailable, match="statement timeout"):
            service.import_nodes(ns, slow(lines, 0.25))
        assert_refused(coord, ns, (1, 1))
        with pytest.raises(Unavailable, match=r"import did not finish within 0\.6 s"):
            service.import_nodes(ns, slow(lines, 0.25), timeout=0.6)
        assert_refused(coord, ns, (1, 1))
        assert service.import_nodes(ns, slow(lines, 0.25), timeout=30).created == 6
        # The session's own timeout is back for what follows on the same connections.
        with service.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar_one() == "500ms"


# ------------------------------------------------------------------ events, blocks


def test_contiguous_run() -> None:
    b = POSITION_BLOCK
    assert contiguous_run([b], 1) == b
    assert contiguous_run([5 * b, 3 * b, 4 * b], 3) == 3 * b
    assert contiguous_run([b, 3 * b, 4 * b], 2) == 3 * b
    assert contiguous_run([b, 3 * b], 2) is None


def test_more_events_than_one_block_take_consecutive_blocks(
    coord: Coordinator, ns: str
) -> None:
    n = POSITION_BLOCK + 10
    lines = (json.dumps({"path": f"/d{i // 1000}/f{i}", "kind": "file"}) for i in range(n))
    result = coord.import_nodes(ns, lines)
    assert result.created == n + 66
    assert result.first_seq is not None and result.last_seq is not None
    assert result.last_seq - result.first_seq + 1 == result.created
    assert result.first_seq % POSITION_BLOCK == 0
    # A later transaction takes a block after all of the import's.
    after = coord.mkdir(ns, "/later")
    assert after.seq is not None and after.seq > result.last_seq
    check_log_explains_table(coord, ns)


def test_a_reader_sees_nothing_of_an_import_until_it_commits(
    coord: Coordinator, ns: str
) -> None:
    """The import holds the position lock from its claim to its commit: a reader
    waits, then sees all of it (no skipped events)."""
    cursor = coord.read_events()[1]
    gate = threading.Event()
    release = threading.Event()

    def slow_lines() -> Any:
        for i in range(100):
            yield json.dumps({"path": f"/s/{i}", "kind": "file"})
        gate.set()
        release.wait(10)

    done: list[Any] = []
    t = threading.Thread(target=lambda: done.append(coord.import_nodes(ns, slow_lines())))
    t.start()
    assert gate.wait(10)
    events, cursor2 = coord.read_events(cursor, wait=0.2)
    assert events == []
    release.set()
    t.join(30)
    events, _ = coord.read_events(cursor2, limit=100_000)
    assert len(events) == 101 and done[0].created == 101


def test_concurrent_creates_and_an_import_in_the_same_directory(
    coord: Coordinator, ns: str
) -> None:
    """Real threads: creates next to an import never break the tree or the log."""
    coord.mkdir(ns, "/shared")
    errors: list[BaseException] = []

    def creator(k: int) -> None:
        try:
            for i in range(30):
                coord.create_file(ns, f"/shared/c{k}-{i}", "")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=creator, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    result = coord.import_nodes(
        ns, (json.dumps({"path": f"/shared/i/{i}", "kind": "file"}) for i in range(3000))
    )
    for t in threads:
        t.join()
    assert not errors and result.created == 3001
    check_log_explains_table(coord, ns)


def test_a_concurrent_create_of_an_imported_path_fails_one_side_cleanly(
    coord: Coordinator, ns: str, database_url: str
) -> None:
    """A create that commits a path the import staged, between its check and its
    insert: the import fails with a typed error and writes nothing."""
    with coord.engine.begin() as conn:  # a create in flight, holding the name
        conn.execute(text("SELECT 1"))
    barrier = threading.Event()

    def lines() -> Any:
        yield json.dumps({"path": "/race", "kind": "dir"})
        barrier.wait(10)

    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(coord.import_nodes(ns, lines()))
        except (Conflict, AlreadyExists) as exc:
            outcome.append(exc)

    t = threading.Thread(target=run)
    t.start()
    coord.mkdir(ns, "/race")
    barrier.set()
    t.join(30)
    assert isinstance(outcome[0], AlreadyExists)
    check_log_explains_table(coord, ns)


# ------------------------------------------------------------------ the CLI


def test_cli_import_file_and_stdin(database_url: str, coord: Coordinator, ns: str,
                                   tmp_path: Any) -> None:
    f = tmp_path / "tree.jsonl"
    f.write_text("\n".join(jl({"path": "/a/b", "kind": "file", "content": "x"})) + "\n")
    runner = CliRunner()
    res = runner.invoke(cli_main, ["import", "--database-url", database_url, ns, str(f)])
    assert res.exit_code == 0, res.output
    assert "imported 2 nodes" in res.output
    res = runner.invoke(cli_main, ["import", "--database-url", database_url, ns, "-"],
                        input='{"path": "/c", "kind": "dir"}\n')
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli_main, ["import", "--database-url", database_url, ns, "-"],
                        input='{"path": "/c", "kind": "dir"}\n{oops\n')
    assert res.exit_code == 2
    # Both problems (the line that exists, the line that does not parse) in one refusal.
    assert res.output.splitlines() == [
        "error: import refused, nothing written: 2 bad lines:", "  line 1: /c already exists",
        "  line 2: not valid JSON (Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1))"]
    assert set(paths_of(coord, ns)) == {"/", "/a", "/a/b", "/c"}
    deep = '{"path": "/deep", "kind": "dir", "metadata": ' + '{"a": ' * 2000 + "}" * 2001
    res = runner.invoke(cli_main, ["import", "--database-url", database_url, ns, "-"],
                        input='{"path": "/e", "kind": "dir"}\n' + deep + "\n")
    assert res.exit_code == 2, res.output
    assert res.output.splitlines() == [
        "error: import refused, nothing written: 1 bad line:",
        "  line 2: JSON nested deeper than 100 levels"]
    assert set(paths_of(coord, ns)) == {"/", "/a", "/a/b", "/c"}


def test_cli_import_refuses_a_line_past_its_limit(database_url: str, coord: Coordinator,
                                                   ns: str) -> None:
    long = json.dumps({"path": "/big", "kind": "file", "content": "x" * 2000})
    res = CliRunner().invoke(
        cli_main, ["import", "--database-url", database_url, "--max-line-bytes", "1000", ns,
                   "-"], input='{"path": "/c", "kind": "dir"}\n' + long + "\n")
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert lines[0] == "error: import refused, nothing written: 1 bad line:"
    assert len(lines) == 2 and lines[1].startswith("  line 2: longer than 1,000 bytes")
    assert_refused(coord, ns, (1, 1))


def test_binary_file_object(coord: Coordinator, ns: str) -> None:
    source = io.BytesIO(b'{"path": "/x", "kind": "dir"}\n{"path": "/x/y", "kind": "file"}\n')
    assert coord.import_nodes(ns, source).created == 2


def test_claim_statement_takes_id_then_lock_then_blocks(coord: Coordinator) -> None:
    """The import's claiming statement keeps the writer protocol of
    coordinator/event_appender.py: the shard fence, transaction id, then the position lock,
    then every nextval (checked on the plan, as
    ``test_block_statement_takes_id_then_lock_then_block`` does for single blocks)."""
    from coordinator.importer import CLAIM_BLOCKS_SQL

    with coord.engine.begin() as conn:
        plan = [r[0] for r in conn.execute(text("EXPLAIN VERBOSE " + CLAIM_BLOCKS_SQL),
                                           {"k": 3, "ns": "t"})]
    text_plan = "\n".join(plan)
    assert "NULL::xid8" not in text_plan, text_plan

    def line_of(needle: str) -> int:
        return next(i for i, line in enumerate(plan) if needle in line)

    assert (line_of("nextval(") < line_of(POSITION_LOCK_SQL)
            < line_of("pg_current_xact_id()") < line_of("pathkeeper_check_placed(")), text_plan
