"""A worker run in a program's main thread takes SIGTERM, SIGINT and the interpreter's
switch interval for itself while it runs, and gives them back when it stops: the program
(a test run, a service embedding the worker) keeps its own Ctrl-C afterwards."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

from indexer_support import run_once

from coordinator import Coordinator


def test_a_worker_gives_back_signal_handlers_and_switch_interval(
    coord: Coordinator, database_url: str, es_url: str, alias: str,
) -> None:
    assert threading.current_thread() is threading.main_thread()
    coord.create_namespace("w")
    coord.create_file("w", "/f", "x")

    def ours(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("not called in this test")

    before = {s: signal.signal(s, ours) for s in (signal.SIGTERM, signal.SIGINT)}
    interval = sys.getswitchinterval()
    try:
        run_once(database_url, es_url, alias, partitions=1)
        assert signal.getsignal(signal.SIGTERM) is ours
        assert signal.getsignal(signal.SIGINT) is ours
        assert sys.getswitchinterval() == interval
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
