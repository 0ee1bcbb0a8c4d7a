"""The README's first screen stays true: every ``pathkeeper ...`` command it shows is a
command of the CLI, with options that command has."""

from __future__ import annotations

import re
from pathlib import Path

import click

from pathkeeper.cli.main import main

README = Path(__file__).resolve().parent.parent / "README.md"


def _first_screen() -> list[str]:
    """The indented command lines before the README's first section."""
    text = README.read_text().split("\n## ", 1)[0]
    return [line.strip() for line in text.splitlines() if line.startswith("    ")]


def _check(words: list[str]) -> str | None:
    """What is wrong with ``pathkeeper <words>``, or None."""
    command: click.Command = main
    ctx = click.Context(main, info_name="pathkeeper", **main.context_settings)
    options = {o for p in command.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
    for word in words:
        if word.startswith("-"):
            if word.split("=")[0] not in options:
                return f"{ctx.command_path} has no option {word}"
        elif isinstance(command, click.Group) and word in command.commands:
            command = command.commands[word]
            ctx = click.Context(command, info_name=word, parent=ctx)
            options = {o for p in command.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
        elif isinstance(command, click.Group):
            return f"{ctx.command_path} has no command {word}"
    return None


def test_the_first_screen_shows_real_commands_and_options() -> None:
    lines = _first_screen()
    for needed in ("./dev demo", "./dev test", "pip install", "pathkeeper db upgrade",
                   "pathkeeper serve", "pathkeeper indexer run"):
        assert any(needed in line for line in lines), needed
    wrong = []
    for line in lines:
        for part in re.split(r"&&|&|\|", line.split("#", 1)[0]):
            words = part.split()
            if words[:1] == ["pathkeeper"]:
                problem = _check(words[1:])
                if problem:
                    wrong.append(f"{line}: {problem}")
    assert wrong == []
