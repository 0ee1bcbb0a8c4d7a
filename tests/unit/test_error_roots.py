"""One error root for the indexer (``indexer.errors.IndexerError``), and the CLI's
handler turning any of the indexer's errors into one ``error:`` line (exit 2)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import click
import pytest
from click.testing import CliRunner

import indexer
from indexer.checkpoints import LayoutMismatch
from indexer.elasticsearch_index import IndexMissing, MappingOutdated
from indexer.errors import IndexerError
from indexer.retention import RetentionError
from indexer.setfold import LogCompacted
from pathkeeper.cli.errors import EXIT_CANNOT_RUN, OperatorErrors, describe


def _indexer_exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.iter_modules(indexer.__path__, "indexer."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException):
                found.append(cls)
    return found


def test_every_indexer_exception_derives_from_the_root() -> None:
    classes = _indexer_exceptions()
    assert len(classes) >= 15, classes  # the search seam's family and the rest
    outside = [c.__qualname__ for c in classes if not issubclass(c, IndexerError)]
    assert outside == []


ERRORS = [
    LayoutMismatch("checkpoints of indexer:x have 4 partitions, not 2"),
    MappingOutdated("index x-v1 lacks field tree"),
    IndexMissing("alias x is gone"),
    RetentionError("nothing to compact"),
    LogCompacted(5, 10),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_the_cli_reports_any_indexer_error_in_one_line(error: IndexerError) -> None:
    assert describe(error) == str(error)

    @click.group(cls=OperatorErrors)
    def cli() -> None:
        pass

    @cli.command()
    def fail() -> None:
        raise error

    result = CliRunner().invoke(cli, ["fail"])
    assert result.exit_code == EXIT_CANNOT_RUN, result.output
    assert result.output == f"error: {error}\n"
