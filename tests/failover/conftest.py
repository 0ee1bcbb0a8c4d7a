"""The failover tests kill the primary under the worker's server-side cursors: such a
cursor cannot be closed on its dead connection, and psycopg warns when it is collected,
which may happen during whichever failover test runs next. That warning is not a failure
of what these tests check (the cursor's server side died with the server), so it is
ignored in this directory only."""

from __future__ import annotations

import pytest

IGNORE_UNCLOSABLE_CURSORS = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/failover/" in str(item.path).replace("\\", "/"):
            item.add_marker(IGNORE_UNCLOSABLE_CURSORS)
