"""The long-form switch of the reliability suite.

``--long`` works when pytest is pointed at this directory or a file in it
(``pytest tests/reliability --long``): pytest reads ``pytest_addoption`` only
from conftest files it loads at start-up, and a plain ``pytest`` from the repo
root does not load this one that early. ``PATHKEEPER_LONG=1`` works in every
case and is what RELIABILITY.md documents.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run the reliability suite's long form (same as PATHKEEPER_LONG=1)",
    )


def is_long(config: pytest.Config) -> bool:
    return bool(config.getoption("--long", default=False)) or (
        os.environ.get("PATHKEEPER_LONG", "") not in ("", "0")
    )


@pytest.fixture(scope="session")
def long_run(pytestconfig: pytest.Config) -> bool:
    """True for the long form: bigger examples, longer histories."""
    return is_long(pytestconfig)
