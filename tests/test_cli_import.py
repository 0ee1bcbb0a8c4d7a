"""``pathkeeper import`` refusing a file: every problem found, whatever the kind (a line
that does not parse, a path twice, a file under a file, a path that exists), in one
round, one per line on stderr, up to a bound; exit 2 and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from coordinator import Coordinator
from coordinator.importer import MAX_REPORTED


def _import(database_url: str, ns: str, file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pathkeeper", "import", ns, str(file), "--database-url",
         database_url], capture_output=True, text=True, timeout=60)


def _counts(coord: Coordinator, ns: str) -> tuple[int, int]:
    from sqlalchemy import text

    with coord.engine.connect() as conn:
        nodes = conn.execute(text("SELECT count(*) FROM nodes WHERE namespace = :ns"),
                             {"ns": ns}).scalar_one()
        events = conn.execute(text("SELECT count(*) FROM events WHERE namespace = :ns"),
                              {"ns": ns}).scalar_one()
    return int(nodes), int(events)


def test_every_kind_of_problem_is_listed_at_once_one_per_line(
    database_url: str, coord: Coordinator, ns: str, tmp_path: Path
) -> None:
    coord.mkdir(ns, "/exists")
    before = _counts(coord, ns)
    rows = [
        json.dumps({"path": "/a", "kind": "dir"}),       # 1: fine
        "{not json",                                      # 2: syntax
        json.dumps({"path": "/a", "kind": "dir"}),       # 3: /a twice
        json.dumps({"path": "/f", "kind": "file"}),      # 4: fine
        json.dumps({"path": "/f/g", "kind": "file"}),    # 5: under a file
        json.dumps({"path": "/exists", "kind": "dir"}),  # 6: exists already
        json.dumps({"path": "/b", "kind": "sock"}),      # 7: bad kind
    ]
    file = tmp_path / "in.jsonl"
    file.write_text("\n".join(rows) + "\n")
    out = _import(database_url, ns, file)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == "error: import refused, nothing written: 5 bad lines:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "line 1", "line 2", "line 5", "line 6", "line 7"]
    assert "/a appears again on line(s) 3" in lines[1]
    assert "not valid JSON" in lines[2]
    assert "/f is a file (line 4)" in lines[3]
    assert "/exists already exists" in lines[4]
    assert "'kind'" in lines[5]
    assert _counts(coord, ns) == before


def test_past_the_bound_the_rest_are_counted(
    database_url: str, coord: Coordinator, ns: str, tmp_path: Path
) -> None:
    before = _counts(coord, ns)
    rows = ["{bad"] * (MAX_REPORTED + 7) + [json.dumps({"path": "/x", "kind": "dir"})] * 2
    file = tmp_path / "in.jsonl"
    file.write_text("\n".join(rows) + "\n")
    out = _import(database_url, ns, file)
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    total = MAX_REPORTED + 8
    assert lines[0] == f"error: import refused, nothing written: {total} bad lines:"
    assert len(lines) == 1 + MAX_REPORTED + 1
    assert lines[-1] == f"  ... and {total - MAX_REPORTED} more"
    assert _counts(coord, ns) == before


def test_the_count_covers_problems_past_the_bound_of_every_check(
    database_url: str, coord: Coordinator, ns: str, tmp_path: Path
) -> None:
    """The same file twice: every line clashes, and the header counts them all (not only
    the ones listed)."""
    n = MAX_REPORTED + 10
    file = tmp_path / "in.jsonl"
    file.write_text("".join(json.dumps({"path": f"/d{i}", "kind": "dir"}) + "\n"
                            for i in range(n)))
    assert _import(database_url, ns, file).returncode == 0
    before = _counts(coord, ns)
    out = _import(database_url, ns, file)
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert lines[0] == f"error: import refused, nothing written: {n} bad lines:"
    assert lines[1] == "  line 1: /d0 already exists"
    assert lines[-1] == "  ... and 10 more"
    assert _counts(coord, ns) == before
