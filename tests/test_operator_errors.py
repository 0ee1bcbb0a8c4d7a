"""What an operator sees when the environment is wrong: one clear line, no traceback.

The database down, the search server down, a malformed URL, a database that was never
migrated: every operator command says what failed and what to do on one ``error:``
line and exits non-zero (2: could not run; ``verify`` keeps 1 for drift), and the
Python API raises a typed error. The commands run as real subprocesses against a real
PostgreSQL cluster and a real search server, with real refused ports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator import Coordinator, CoordinatorError
from coordinator.errors import InvalidArgument, InvalidConfiguration, NotMigrated
from pathkeeper.local.ports import free_port
from pathkeeper.local.postgres import LocalPostgres

ROOT = Path(__file__).resolve().parent.parent
EXIT_CANNOT_RUN = 2


def run_cli(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATHKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "pathkeeper", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def unmigrated_url(pg_cluster: LocalPostgres) -> str:
    return pg_cluster.create_database(f"pk_unmigrated_{os.getpid()}_{time.monotonic_ns()}")


@pytest.fixture(scope="module")
def dead_db_url() -> str:
    return f"postgresql://nobody@127.0.0.1:{free_port()}/pathkeeper"


@pytest.fixture(scope="module")
def dead_es_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def commands(db: str, es: str) -> dict[str, list[str]]:
    return {
        "verify": ["verify", "--database-url", db, "--es-url", es, "-q"],
        "replay": ["replay", "--database-url", db, "--es-url", es, "-q"],
        "reindex": ["reindex", "--database-url", db, "--es-url", es, "-q"],
        "indexer status": ["indexer", "status", "--database-url", db],
        "keys create": ["keys", "create", "--database-url", db, "--namespace", "n",
                        "--scope", "read"],
        "dead-letters": ["indexer", "dead-letters", "--database-url", db],
        "db upgrade": ["db", "upgrade", "--database-url", db],
    }


SEARCH_COMMANDS = ("verify", "replay", "reindex")


def assert_one_clear_line(result: subprocess.CompletedProcess[str], *hints: str) -> None:
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out[-3000:]
    assert result.returncode == EXIT_CANNOT_RUN, (result.returncode, out[-2000:])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out[-2000:]
    line = errors[0]
    assert "secret" not in out
    for hint in hints:
        assert hint.lower() in line.lower(), (hint, line)
    assert len(line) < 400, line


@pytest.mark.parametrize("mode", ["db_down", "db_malformed", "unmigrated", "es_down",
                                  "es_malformed"])
def test_operator_commands_fail_with_one_line(
    mode: str, database_url: str, es_url: str, unmigrated_url: str, dead_db_url: str,
    dead_es_url: str,
) -> None:
    db, es = database_url, es_url
    hints: tuple[str, ...]
    if mode == "db_down":
        db, hints = dead_db_url, ("database", "--database-url")
    elif mode == "db_malformed":
        db, hints = "not a url", ("database URL", "postgresql://")
    elif mode == "unmigrated":
        db, hints = unmigrated_url, ("pathkeeper db upgrade",)
    elif mode == "es_down":
        es, hints = dead_es_url, ("search server", "--es-url")
    else:
        es, hints = "http://u:secret@host:notaport", ("search server URL", "http")
    for name, args in commands(db, es).items():
        if mode.startswith("es") and name not in SEARCH_COMMANDS:
            continue
        if mode == "unmigrated" and name == "db upgrade":
            continue  # that is the fix, not a failure
        result = run_cli(*args)
        assert_one_clear_line(result, *hints)


def test_indexer_run_on_an_unmigrated_database_stops_and_says_upgrade(
    unmigrated_url: str, es_url: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pathkeeper", "indexer", "run", "--database-url", unmigrated_url,
         "--es-url", es_url, "--alias", f"pk-unmigrated-{os.getpid()}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert_one_clear_line(result, "pathkeeper db upgrade")


def test_indexer_run_stops_cleanly_on_sigterm_while_waiting_for_the_database(
    dead_db_url: str, es_url: str
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "pathkeeper", "indexer", "run", "--database-url", dead_db_url,
         "--es-url", es_url, "--alias", f"pk-dead-{os.getpid()}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert child.stderr is not None
    try:
        # It is retrying once it logged a failed start-up.
        for line in child.stderr:
            if "startup_failed" in line:
                break
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "Traceback" not in err and "RuntimeError" not in err, err[-3000:]
    assert child.returncode == 0, err[-2000:]


# ------------------------------------------------------------------ Python API


def test_unmigrated_database_raises_not_migrated(unmigrated_url: str) -> None:
    with Coordinator.connect(unmigrated_url) as coord:
        for call in (
            lambda: coord.create_namespace("n"),
            lambda: coord.mkdir("n", "/a"),
            lambda: coord.rename("n", "/a", "b"),  # a server-side function of ours
            lambda: coord.stat("n", "/"),
            lambda: coord.read_events(),
            lambda: coord.namespaces(),
        ):
            with pytest.raises(NotMigrated, match="pathkeeper db upgrade"):
                call()


def test_read_events_refuses_a_limit_below_one(coord: Coordinator) -> None:
    for limit in (0, -1):
        with pytest.raises(InvalidArgument, match="limit"):
            coord.read_events(limit=limit)
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(InvalidArgument, CoordinatorError)


@pytest.mark.parametrize("url", [
    "not a url", "", "mysql://u:secret@h/db", "http://localhost:9200",
    "postgresql://u:secret@h:notaport/db",
])
def test_connect_refuses_a_malformed_database_url(url: str) -> None:
    with pytest.raises(InvalidConfiguration, match="database URL") as info:
        Coordinator.connect(url)
    assert "secret" not in str(info.value)


def bad_inputs(db: str, es: str, alias: str) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """Each command line with a bad option, and what its error line must name."""
    search = ["--database-url", db, "--es-url", es, "--alias", alias, "-q"]
    return {
        "retain too long": (["compact", "--database-url", db, "--retain", "99999999999d"],
                            ("--retain",)),
        "port, 2 workers": (["serve", "--database-url", db, "--port", "99999", "--workers",
                             "2"], ("--port", "65535")),
        "port, 1 worker": (["serve", "--database-url", db, "--port", "99999"],
                           ("--port", "65535")),
        "no partitions": (["indexer", "run", "--database-url", db, "--es-url", es,
                           "--partitions", "0"], ("--partitions",)),
        "verify, invalid namespace": (["verify", *search, "--namespace", "../x"],
                                      ("namespace",)),
        "verify, no such namespace": (["verify", *search, "--namespace", "nosuch"],
                                      ("nosuch",)),
        "replay, invalid namespace": (["replay", *search, "--namespace", "no/such",
                                       "--dry-run"], ("namespace",)),
        "replay, no such namespace": (["replay", *search, "--namespace", "nosuch",
                                       "--dry-run"], ("nosuch",)),
        "reindex, no such namespace": (["reindex", *search, "--namespace", "nosuch",
                                        "--dry-run"], ("nosuch",)),
    }


@pytest.mark.parametrize("case", list(bad_inputs("", "", "")))
def test_bad_input_is_one_error_line_and_exit_2(
    case: str, coord: Coordinator, database_url: str, es_url: str, alias: str
) -> None:
    """No traceback, no half-done work, no "0 compared, ok": one ``error:`` line naming
    the option, exit 2, before anything runs (a server does not start listening)."""
    coord.create_namespace("real")
    args, hints = bad_inputs(database_url, es_url, alias)[case]
    result = run_cli(*args, timeout=60)
    assert_one_clear_line(result, *hints)
