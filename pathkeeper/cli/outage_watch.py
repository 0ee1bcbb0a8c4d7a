"""A bound on how long a run that should end (``indexer run --once``) waits for a server
that does not answer: the worker itself retries for ever, as a service should, so a
watch beside it probes both servers and stops it once one has been down for the bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from indexer.search_client import SearchSecurity

#: Seconds one probe may take.
PROBE_SECONDS = 5.0


class OutageWatch:
    """Probes PostgreSQL and the search server every ``interval`` seconds from a thread of
    its own; when one has not answered for ``bound`` seconds in a row, records why in
    ``failure`` and calls ``give_up`` (once)."""

    def __init__(self, database_url: str, es_url: str, bound: float,
                 give_up: Callable[[], None], interval: float = 1.0, *,
                 security: SearchSecurity | None = None) -> None:
        self.database_url = database_url
        self.es_url = es_url
        self.security = security
        self.bound = bound
        self.give_up = give_up
        self.interval = min(interval, bound)
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pathkeeper-outage-watch",
                                        daemon=True)

    def __enter__(self) -> OutageWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(PROBE_SECONDS * 2)

    def _watch(self) -> None:
        from sqlalchemy import create_engine, pool, text

        from coordinator.db import parse_database_url
        from indexer.search_client import open_search
        from pathkeeper.cli.errors import describe

        timeout = min(PROBE_SECONDS, self.bound)
        engine = create_engine(parse_database_url(self.database_url),
                               poolclass=pool.NullPool,
                               connect_args={"connect_timeout": max(1, int(timeout))})
        es = open_search(self.es_url, security=self.security, request_timeout=timeout,
                         max_retries=0)

        def database() -> None:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))

        def search() -> None:
            from indexer.search_engine import SearchAuthFailed, SearchRefused

            try:
                es.health(timeout)
            except SearchRefused as exc:
                # Refused credentials stop the worker as surely as a server that is down.
                if exc.status >= 500 or isinstance(exc, SearchAuthFailed):
                    raise

        down_since: dict[str, float] = {}
        try:
            while not self._stop.is_set():
                for name, probe in (("database", database), ("search", search)):
                    try:
                        probe()
                    except Exception as exc:
                        since = down_since.setdefault(name, time.monotonic())
                        if time.monotonic() - since >= self.bound:
                            reason = describe(exc) or f"{type(exc).__name__}: {exc}"
                            self.failure = f"gave up after {self.bound:g} s: {reason}"
                            self.give_up()
                            return
                    else:
                        down_since.pop(name, None)
                self._stop.wait(self.interval)
        finally:
            engine.dispose()
            es.close()
