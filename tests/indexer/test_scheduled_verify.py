"""The worker's scheduled verify (``WorkerConfig.verify_cron``, ``indexer run --verify-cron``):
off by default; when set, it runs on the cron schedule and publishes the drift count
as the ``pathkeeper_verify_drift`` gauge.

The test schedule is the six-field form with a seconds field (``"* * * * * *"``: every
second), which ``verify.cron_trigger`` accepts next to the standard five-field crontab.
"""

from __future__ import annotations

import time

from indexer_support import running_worker, wait_caught_up

from coordinator import Coordinator
from indexer.search_engine import SearchEngine
from indexer.verify import VERIFY_DRIFT


def gauge() -> float:
    value: float = VERIFY_DRIFT._value.get()  # prometheus_client has no public getter
    return value


def wait_for_gauge(want: float, timeout: float = 30.0) -> None:
    """Poll the gauge (a metric has no change notification) until it shows ``want``."""
    deadline = time.monotonic() + timeout
    while gauge() != want:
        assert time.monotonic() < deadline, f"verify drift gauge is {gauge()}, expected {want}"
        time.sleep(0.05)


def test_scheduled_verify_publishes_drift(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("v")
    coord.mkdir("v", "/d")
    victim = coord.create_file("v", "/d/victim", "text").node.id
    coord.create_file("v", "/d/other", "text")
    # A value no verify run publishes, so the first 0 below is a run, not the default.
    VERIFY_DRIFT.set(-2)
    with running_worker(database_url, es_url, alias, partitions=1,
                        verify_cron="* * * * * *") as worker:
        wait_caught_up(coord, alias)
        wait_for_gauge(0)
        # Plant drift behind the worker's back: a document missing from the index.
        es.delete(index=alias, id=victim, routing="v", refresh=True)
        wait_for_gauge(1)
        assert worker.config.verify_cron == "* * * * * *"


