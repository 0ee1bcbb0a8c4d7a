"""``pathkeeper ns create|list|drop`` and ``pathkeeper tree`` against a real database:
what they print, and one ``error:`` line (exit 2, no traceback) for what cannot be done."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

from coordinator import Coordinator
from pathkeeper.cli.main import main


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pathkeeper", *args, "--database-url",
                           database_url], capture_output=True, text=True, timeout=60)


def test_namespaces_are_created_listed_and_dropped(database_url: str,
                                                   coord: Coordinator) -> None:
    runner = CliRunner()
    env = {"PATHKEEPER_DATABASE_URL": database_url}
    for name in ("docs", "alpha"):
        made = runner.invoke(main, ["ns", "create", name], env=env)
        assert made.exit_code == 0, made.output
        assert made.output.startswith(f"created namespace {name} (event ")
    assert coord.namespaces() == ["alpha", "docs"]
    assert runner.invoke(main, ["ns", "list"], env=env).output == "alpha\ndocs\n"

    coord.mkdir("docs", "/d")
    refused = _cli(database_url, "ns", "drop", "docs")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (
        "error: namespace 'docs' is not empty: --force drops it with everything in it")
    assert coord.namespaces() == ["alpha", "docs"]  # nothing dropped
    dropped = runner.invoke(main, ["ns", "drop", "--force", "docs"], env=env)
    assert dropped.exit_code == 0, dropped.output
    assert coord.namespaces() == ["alpha"]

    again = _cli(database_url, "ns", "create", "alpha")
    assert again.returncode == 2
    assert again.stderr.strip() == "error: namespace 'alpha' already exists"
    bad = _cli(database_url, "ns", "create", "no/slash")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_tree_prints_paths_in_order_and_refuses_unknown_namespaces(
    database_url: str, coord: Coordinator, ns: str
) -> None:
    coord.mkdir(ns, "/clinton/projects", parents=True)
    coord.create_file(ns, "/clinton/projects/README.txt", "hello")
    coord.create_file(ns, "/a.txt", "x")
    out = CliRunner().invoke(main, ["tree", ns], env={"PATHKEEPER_DATABASE_URL": database_url})
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "/", "/a.txt", "/clinton/", "/clinton/projects/", "/clinton/projects/README.txt"]
    sub = CliRunner().invoke(main, ["tree", ns, "/clinton/projects"],
                             env={"PATHKEEPER_DATABASE_URL": database_url})
    assert sub.output.splitlines() == ["/clinton/projects/", "/clinton/projects/README.txt"]

    missing = _cli(database_url, "tree", "nope")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: no namespace 'nope'"
    no_path = _cli(database_url, "tree", ns, "/no/such")
    assert no_path.returncode == 2 and no_path.stderr.startswith("error: ")


def test_an_empty_import_says_it_wrote_no_events(database_url: str, ns: str) -> None:
    out = CliRunner().invoke(main, ["import", ns, "-"], input=b"",
                             env={"PATHKEEPER_DATABASE_URL": database_url})
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"imported 0 nodes (0 lines, 0 parent directories created) "
                                 f"into {ns} in ")
    assert out.output.rstrip().endswith("; no events") and "None" not in out.output


def test_an_unknown_namespace_is_one_error_line_for_every_command(
    database_url: str, es_url: str, ns: str
) -> None:
    env = {"PATHKEEPER_ES_URL": es_url}
    for args in (("verify", "--namespace", "nope"), ("reindex", "--namespace", "nope"),
                 ("replay", "--until", "1", "--namespace", "nope", "--dry-run"),
                 ("replay", "--namespace", "nope"), ("tree", "nope"), ("import", "nope", "-"),
                 ("ns", "drop", "nope")):
        out = subprocess.run([sys.executable, "-m", "pathkeeper", *args, "--database-url",
                              database_url], capture_output=True, text=True, timeout=60,
                             input="", env={**os.environ, **env})
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stdout == "" and out.stderr.count("\n") == 1, (args, out.stderr)
        assert out.stderr.startswith("error: ") and "'nope'" in out.stderr, out.stderr
    # A key may be made before its namespace (provisioning a tenant), but not silently.
    key = _cli(database_url, "keys", "create", "--namespace", "nope", "--namespace", ns,
               "--scope", "read")
    assert key.returncode == 0 and "secret: " in key.stdout
    assert ("warning: no namespace 'nope' (yet): the key can use it once it is created"
            in key.stderr.splitlines())


def test_replay_as_of_a_past_position_takes_a_namespace_dropped_since(
    database_url: str, es_url: str, alias: str, coord: Coordinator
) -> None:
    made = coord.create_namespace("gone")
    coord.mkdir("gone", "/d")
    coord.drop_namespace("gone", force=True)
    assert made.seq is not None
    out = subprocess.run(
        [sys.executable, "-m", "pathkeeper", "replay", "--until", str(made.seq + 1),
         "--namespace", "gone", "--dry-run", "--alias", alias, "--database-url",
         database_url, "--es-url", es_url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "events: would write" in out.stdout
