"""``indexer run --once`` is a job that must end: with a server that stays down it gives up
after ``--give-up-after`` with one ``error:`` line and exit 2 (the long-running worker
keeps waiting)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

#: Nothing listens on the discard port.
DOWN_SEARCH = "http://127.0.0.1:9"
DOWN_DATABASE = "postgresql://postgres@127.0.0.1:9/nothing"


def run_once(database_url: str, es_url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pathkeeper", "indexer", "run", "--once",
         "--database-url", database_url, "--es-url", es_url, "--give-up-after", "3"],
        capture_output=True, text=True, timeout=60,
    )
    return proc, time.monotonic() - started


@pytest.mark.parametrize("which", ["search", "database"])
def test_once_gives_up_when_a_server_stays_down(database_url: str, es_url: str,
                                                which: str) -> None:
    if which == "search":
        proc, took = run_once(database_url, DOWN_SEARCH)
        expected = "cannot reach the search server"
    else:
        proc, took = run_once(DOWN_DATABASE, es_url)
        expected = "cannot reach the database"
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: gave up after 3 s: ") and expected in errors[0]
    assert took < 30
