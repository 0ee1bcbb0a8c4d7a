"""The content-size limit (``Settings.max_content_bytes``): one rule, in bytes of UTF-8 as
stored, refused with ``TooLarge`` on every write path (a lone command, a group, a batch,
an import; over HTTP 413: tests/http/test_http_content_limit.py) with nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from coordinator import Coordinator
from coordinator.commands import CreateFile, WriteFile
from coordinator.errors import TooLarge
from coordinator.paths import MAX_CONTENT_BYTES
from coordinator.settings import Settings

LIMIT = 1000
#: 1,000 bytes of UTF-8 in 500 characters; one more character is over the limit.
AT_LIMIT = "é" * 500
OVER = "é" * 501


@pytest.fixture
def small(database_url: str) -> Iterator[Coordinator]:
    with Coordinator.connect(database_url, max_content_bytes=LIMIT) as c:
        c.create_namespace("t")
        c.create_file("t", "/f", "small")
        yield c


def _events(coord: Coordinator) -> int:
    return len(coord.read_events(0, 10_000)[0])


def test_every_python_write_path_refuses_content_over_the_limit(small: Coordinator) -> None:
    before = _events(small)
    attempts = [
        lambda: small.create_file("t", "/big", OVER),
        lambda: small.write_file("t", "/f", OVER),
        lambda: small.apply("t", [CreateFile("/ok", "fine"), CreateFile("/big", OVER)]),
        lambda: small.apply("t", [WriteFile("/f", OVER)]),
        lambda: small.import_nodes("t", [
            json.dumps({"path": "/d/ok", "kind": "file", "content": "fine"}),
            json.dumps({"path": "/d/big", "kind": "file", "content": OVER}),
        ]),
    ]
    for attempt in attempts:
        with pytest.raises(TooLarge, match="1002 bytes, more than the limit of 1000"):
            attempt()
    with pytest.raises(TooLarge), small.transaction("t") as tx:
        tx.mkdir("/g")
        tx.write_file("/f", OVER)
    # Nothing of any of them was written.
    assert _events(small) == before
    assert sorted(n.path for n in small.walk("t")) == ["/", "/f"]
    assert small.stat("t", "/f").content == "small"
    # At the limit, in bytes, every path takes it.
    small.create_file("t", "/a", AT_LIMIT)
    small.write_file("t", "/f", AT_LIMIT)
    small.apply("t", [CreateFile("/b", AT_LIMIT)])
    with small.transaction("t") as tx:
        tx.create_file("/c", AT_LIMIT)
    small.import_nodes("t", [json.dumps({"path": "/d", "kind": "file", "content": AT_LIMIT})])
    assert {small.stat("t", p).content for p in ("/a", "/b", "/c", "/d", "/f")} == {AT_LIMIT}


def test_the_default_limit_refuses_a_file_past_it(coord: Coordinator, ns: str) -> None:
    assert coord.settings.max_content_bytes == MAX_CONTENT_BYTES
    with pytest.raises(TooLarge):
        coord.create_file(ns, "/big", "x" * (MAX_CONTENT_BYTES + 1))
    coord.create_file(ns, "/big", "x" * MAX_CONTENT_BYTES)


def test_cli_import_refuses_content_over_the_limit(
    database_url: str, tmp_path: object
) -> None:
    from pathlib import Path

    from pathkeeper.cli.main import main

    with Coordinator.connect(database_url) as coord:
        coord.create_namespace("t")
    source = Path(str(tmp_path)) / "in.jsonl"
    source.write_text(json.dumps({"path": "/big", "kind": "file", "content": OVER}) + "\n")
    result = CliRunner().invoke(main, [
        "import", "--database-url", database_url, "--max-content-bytes", str(LIMIT), "t",
        str(source)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()  # the refusal, then the bad line
    assert lines[0] == "error: import refused, nothing written: 1 bad line:", result.output
    assert len(lines) == 2 and "more than the limit of 1000" in lines[1]
    # The same from the environment.
    result = CliRunner().invoke(main, ["import", "--database-url", database_url, "t",
                                       str(source)],
                                env={"PATHKEEPER_MAX_CONTENT_BYTES": str(LIMIT)})
    assert result.exit_code == 2, result.output
    # A limit that is no size is a usage error, not a traceback.
    result = CliRunner().invoke(main, ["import", "--database-url", database_url,
                                       "--max-content-bytes", "0", "t", str(source)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    with Coordinator.connect(database_url) as coord:
        assert [n.path for n in coord.walk("t")] == ["/"]


def test_settings_carry_the_limit() -> None:
    assert Settings().max_content_bytes == MAX_CONTENT_BYTES
