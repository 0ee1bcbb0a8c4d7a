"""The local high-availability cluster helper: a primary, a kill -9 and a switchover
each end with another primary, and ``stop`` leaves no process and no file behind."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from pathkeeper.local.ha import LocalHACluster


def _processes_under(base_dir: Path) -> list[str]:
    """Command lines of running processes that name ``base_dir``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(base_dir) in cmdline:
                found.append(cmdline)
    return found


def _write_via_url(url: str) -> int:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (n int)")
        conn.execute("INSERT INTO t VALUES (1)")
        row = conn.execute("SELECT count(*) FROM t").fetchone()
        assert row is not None
        return int(row[0])


def test_failover_switchover_and_clean_stop() -> None:
    cluster = LocalHACluster()
    try:
        cluster.start()
        assert cluster.start_seconds < 120
        assert cluster.memory_bytes() > 0
        # The multi-host URL finds the primary, wherever it is.
        assert _write_via_url(cluster.url()) == 1

        killed = cluster.kill_primary()
        began = time.monotonic()
        new = cluster.wait_primary(other_than=killed)
        assert new is not killed and time.monotonic() - began < 30
        # Synchronous replication: the acknowledged row survived the kill.
        assert _write_via_url(cluster.url()) == 2

        cluster.wait_healthy()  # the old primary is back, as a standby
        switched = cluster.switchover()
        assert switched is not new
        assert _write_via_url(cluster.url()) == 3
    finally:
        cluster.stop()
    assert _processes_under(cluster.base_dir) == []
    assert not cluster.base_dir.exists()
