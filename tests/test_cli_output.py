"""What operator commands print: words and numbers, never a Python repr (a dict, a list,
a timedelta, None); durations with a unit; tables with a header."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import click

from coordinator import Coordinator
from pathkeeper.cli.main import main

REPRS = ("{'", "['", "None", "days, ")


def _run(database_url: str, es_url: str, *args: str,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url,
           "PATHKEEPER_LOG_FORMAT": "text", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "pathkeeper", *args], capture_output=True,
                          text=True, timeout=120, env=env, input=input)


def test_no_command_prints_a_python_repr(database_url: str, es_url: str, alias: str,
                                         coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/a/b", parents=True)
    coord.create_file(ns, "/a/b/f.txt", "hello")
    runs = [
        ("import", ns, "-"),
        ("indexer", "run", "--once", "--alias", alias),
        ("indexer", "status", "--alias", alias),
        ("indexer", "dead-letters", "--alias", alias),
        ("verify", "--alias", alias),
        ("reindex", "--alias", alias),
        ("replay", "--alias", alias),
        ("snapshot", "take"),
        ("snapshot", "list"),
        ("compact", "--retain", "7d"),
        ("compact", "--retain", "0", "--dry-run"),
        ("keys", "create", "--namespace", ns, "--scope", "read"),
        ("keys", "list"),
        ("ns", "list"),
        ("tree", ns),
        ("db", "current"),
        ("db", "history"),
    ]
    for args in runs:
        out = _run(database_url, es_url, *args, input="")
        assert out.returncode == 0, (args, out.stderr)
        for text in (out.stdout, out.stderr):
            for repr_ in REPRS:
                assert repr_ not in text, (args, repr_, text)
    compact = _run(database_url, es_url, "compact", "--retain", "7d")
    assert "at least 7d old" in compact.stdout, compact.stdout


def test_a_duration_without_a_unit_is_refused_naming_the_units(
    database_url: str, es_url: str
) -> None:
    for args in (("compact", "--retain", "5"),
                 ("indexer", "run", "--snapshot-cron", "0 3 * * *", "--compact-retain", "5")):
        out = _run(database_url, es_url, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        line = out.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith("error: "), line
        assert "'5'" in line and "a unit" in line and "5s" in line and "7d" in line, line
    assert _run(database_url, es_url, "compact", "--retain", "5s").returncode == 0


def test_keys_list_has_a_header(database_url: str, es_url: str, ns: str) -> None:
    made = _run(database_url, es_url, "keys", "create", "--namespace", ns, "--scope", "write",
                "--label", "ci")
    assert made.returncode == 0, made.stderr
    lines = _run(database_url, es_url, "keys", "list").stdout.splitlines()
    assert lines[0].split() == ["id", "scope", "namespaces", "state", "label"]
    assert lines[1].split()[1:] == ["write", ns, "active", "ci"]


def test_help_describes_only_options_the_command_has() -> None:
    """A --option named in a command's help is one that command has (verify and reindex
    once described an --until that only replay has), or follows the name of the command
    that has it ("replay --until")."""
    root = click.Context(main, info_name="pathkeeper", **main.context_settings)
    commands = list(_walk(main, root))
    options_of = {path.split()[-1]: _declared(command, ctx) for path, command, ctx in commands}
    wrong = []
    for path, command, ctx in commands:
        text = command.get_help(ctx).split("\nCommands:")[0]  # a group: its own options
        for before, mentioned in re.findall(r"(\S*)\s+(--[a-z][a-z-]*[a-z])", text):
            if (mentioned not in _declared(command, ctx)
                    and mentioned not in options_of.get(before, set())):
                wrong.append(f"{path}: {before} {mentioned}")
    assert wrong == []


def _declared(command: click.Command, ctx: click.Context) -> set[str]:
    return {opt for p in command.get_params(ctx) for opt in (*p.opts, *p.secondary_opts)}


def _walk(command: click.Command, ctx: click.Context
          ) -> Iterator[tuple[str, click.Command, click.Context]]:
    yield ctx.command_path, command, ctx
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx))


def test_every_duration_option_says_its_unit() -> None:
    """A duration is either parsed by the one duration parser (a unit required: 7d, 30m,
    5s) or is a number of seconds that its metavar says is SECONDS: never a bare number
    whose unit the operator must guess."""
    from pathkeeper.cli.options import check_duration

    root = click.Context(main, info_name="pathkeeper", **main.context_settings)
    durations = []
    for path, command, _ctx in _walk(main, root):
        for param in command.params:
            name = param.name or ""
            if isinstance(param, click.Option) and re.search(
                    r"timeout|interval|ttl|give_up|serve_for|retain|seconds", name):
                durations.append(f"{path} {param.opts[0]}")
                if param.callback is check_duration:
                    assert param.metavar == "DURATION", (path, param.opts)
                else:
                    assert param.metavar == "SECONDS", (path, param.opts)
    assert len(durations) >= 11
