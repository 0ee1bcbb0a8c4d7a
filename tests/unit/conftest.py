"""The unit tier: tests that need neither PostgreSQL nor a search server, so that they
run alone in seconds (``./dev test`` runs them before the rest).

The fixtures that start or reach a server are refused here: a test that asks for one
belongs in another folder, not in this tier.
"""

from __future__ import annotations

from typing import NoReturn

import pytest


def _refused(what: str) -> NoReturn:
    pytest.fail(f"the unit tier uses no {what}: move this test out of tests/unit")


@pytest.fixture(scope="session")
def pg_cluster() -> NoReturn:
    _refused("PostgreSQL")


@pytest.fixture(scope="session")
def es_url() -> NoReturn:
    _refused("search server")
