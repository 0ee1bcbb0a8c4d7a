"""One error root for the coordinator: every exception it raises to a caller is a
``CoordinatorError``, and a driver error is translated once, in ``coordinator.db``,
before it leaves a call: callers (the CLI, the HTTP app) never meet psycopg's or
SQLAlchemy's errors from it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

import coordinator
from coordinator import Coordinator, CoordinatorError, NotMigrated, Unavailable, api_keys
from pathkeeper.local.postgres import LocalPostgres, free_port

#: Signals between the coordinator's own parts, each caught before a call returns:
#: ``Retry`` and ``Disconnected`` by the retry loop (``retries.check_retry``), the
#: import's ``_Abort`` by the import.
INTERNAL_SIGNALS = {"coordinator.retries.Retry", "coordinator.retries.Disconnected"}


def _exception_classes() -> Iterator[type[BaseException]]:
    for info in pkgutil.walk_packages(coordinator.__path__, "coordinator."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException):
                yield cls


def test_every_exception_class_of_the_coordinator_derives_from_its_root() -> None:
    strays = [f"{c.__module__}.{c.__qualname__}" for c in _exception_classes()
              if not issubclass(c, CoordinatorError)]
    assert sorted(strays) == sorted(INTERNAL_SIGNALS)


def _calls(coord: Coordinator) -> list[tuple[str, Callable[[], Any]]]:
    """Calls the entry points make, each needing the database: the ``Coordinator``'s,
    and the API keys' (the CLI's ``keys`` commands and the HTTP app's authentication)."""
    return [
        ("namespaces", coord.namespaces),
        ("stat", partial(coord.stat, "t", "/")),
        ("mkdir", partial(coord.mkdir, "t", "/d")),
        ("walk", lambda: list(coord.walk("t"))),
        ("read_events", partial(coord.read_events, None, wait=1)),
        ("create_key", partial(api_keys.create_key, coord.engine, ["t"], "read")),
        ("revoke_key", partial(api_keys.revoke_key, coord.engine,
                               "0f0e0d0c-0b0a-4908-8706-050403020100")),
        ("list_keys", partial(api_keys.list_keys, coord.engine)),
        ("find_active_key", partial(api_keys.find_active_key, coord.engine, "0" * 64)),
    ]


def test_no_driver_error_leaves_a_call_when_the_database_is_down() -> None:
    with Coordinator.connect(f"postgresql://pathkeeper@127.0.0.1:{free_port()}/none") as coord:
        for what, call in _calls(coord):
            with pytest.raises(CoordinatorError) as info:
                call()
            assert isinstance(info.value, Unavailable), (what, info.value)


def test_no_driver_error_leaves_a_call_on_a_database_never_migrated(
    pg_cluster: LocalPostgres,
) -> None:
    url = pg_cluster.create_database(f"pk_bare_{os.getpid()}")
    with Coordinator.connect(url) as coord:
        for what, call in _calls(coord):
            with pytest.raises(CoordinatorError) as info:
                call()
            assert isinstance(info.value, NotMigrated), (what, info.value)
