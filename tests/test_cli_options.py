"""Every option of every ``pathkeeper`` command can come from the environment, under one
prefix, and ``--help`` names the variable; the names operators already set still work."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import click
from click.testing import CliRunner

from coordinator import Coordinator
from pathkeeper.cli.main import main

PREFIX = "PATHKEEPER_"


def _commands(
    command: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Context, click.Command]]:
    yield ctx, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


def _options() -> Iterator[tuple[str, click.Option, click.Context]]:
    root = click.Context(main, info_name="pathkeeper", **main.context_settings)
    for ctx, command in _commands(main, root):
        for param in command.params:
            # --help and --version act and exit: nothing to configure.
            if isinstance(param, click.Option) and param.expose_value:
                yield ctx.command_path, param, ctx


def test_every_option_has_a_variable_of_the_prefix_shown_in_its_help() -> None:
    missing = []
    names: dict[str, str] = {}
    options = list(_options())
    assert len(options) > 60  # the walk reached the subcommands
    for path, option, ctx in options:
        record = option.get_help_record(ctx)
        help_text = record[1] if record else ""
        found = re.search(r"env var: ([A-Z0-9_]+)", help_text)
        if found is None or not found.group(1).startswith(PREFIX):
            missing.append(f"{path} {option.opts[-1]}")
        else:
            names[f"{path} {option.opts[-1]}"] = found.group(1)
    assert missing == []
    # The names operators already use, unchanged (one variable for every command).
    assert names["pathkeeper serve --database-url"] == "PATHKEEPER_DATABASE_URL"
    assert names["pathkeeper indexer run --es-url"] == "PATHKEEPER_ES_URL"
    assert names["pathkeeper import --max-content-bytes"] == "PATHKEEPER_MAX_CONTENT_BYTES"
    assert names["pathkeeper --log-format"] == "PATHKEEPER_LOG_FORMAT"
    assert names["pathkeeper compact --retain"] == "PATHKEEPER_RETENTION"
    # The others are named for their command.
    assert names["pathkeeper serve --max-inflight"] == "PATHKEEPER_SERVE_MAX_INFLIGHT"
    assert names["pathkeeper indexer run --partitions"] == "PATHKEEPER_INDEXER_RUN_PARTITIONS"


def test_help_names_the_variable() -> None:
    out = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert out.exit_code == 0
    assert "env var: PATHKEEPER_SERVE_MAX_INFLIGHT" in out.output
    assert "env var: PATHKEEPER_DATABASE_URL" in out.output


def test_an_option_from_its_variable_takes_effect(database_url: str, coord: Coordinator,
                                                  ns: str) -> None:
    line = json.dumps({"path": "/big", "kind": "file", "content": "x" * 200}) + "\n"
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_IMPORT_MAX_LINE_BYTES": "100"}
    out = CliRunner().invoke(main, ["import", ns, "-"], input=line, env=env)
    assert out.exit_code == 2 and "longer than 100 bytes" in out.output, out.output
    env["PATHKEEPER_MAX_CONTENT_BYTES"] = "10"
    del env["PATHKEEPER_IMPORT_MAX_LINE_BYTES"]
    out = CliRunner().invoke(main, ["import", ns, "-"], input=line, env=env)
    assert out.exit_code == 2 and "line 1: " in out.output, out.output
    assert coord.namespaces() == [ns] and [n.path for n in coord.walk(ns, "/")] == ["/"]
