"""A throwaway PostgreSQL cluster for tests, benchmarks and the demo.

initdb into a temporary directory, start on a free loopback port, stop and
remove it afterwards. When running as root (CI, these machines) the server runs
as an unprivileged user, because initdb and postgres refuse root.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pathkeeper.local.ports import free_port

SERVER_SETTINGS = {
    # Opposing directory moves can deadlock; detect it quickly so the retry is cheap.
    "deadlock_timeout": "50ms",
    "max_connections": "200",
    "shared_buffers": "128MB",
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "log_min_messages": "warning",
    "logging_collector": "off",
}

#: What a cluster needs to publish a namespace to another one (``shard move``: a
#: row-filtered publication, a subscription on the other side, docs/sharding.md section 3).
#: The slot's WAL is bounded, so a subscriber that is gone cannot fill the disk.
LOGICAL_REPLICATION_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "max_logical_replication_workers": "8",
    "max_sync_workers_per_subscription": "4",
    "max_worker_processes": "16",
    "max_slot_wal_keep_size": "'1GB'",
    # The subscriber's apply worker reports its position this often (the drain waits
    # for it).
    "wal_receiver_status_interval": "1s",
}


def find_bin_dir() -> Path:
    """Where initdb/pg_ctl live: $PG_BIN, PATH, Debian's layout, or the pgserver wheel."""
    candidates: list[str] = []
    if os.environ.get("PG_BIN"):
        candidates.append(os.environ["PG_BIN"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    try:
        import pgserver  # type: ignore[import-not-found]

        candidates.append(str(Path(pgserver.__file__).parent / "pginstall" / "bin"))
    except ImportError:
        pass
    on_path = shutil.which("initdb")
    if on_path:  # last: on Debian this may be a pg_wrapper script, not the server's own
        candidates.append(str(Path(on_path).parent))
    for c in candidates:
        if (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    raise RuntimeError(
        "no PostgreSQL binaries found: install postgresql (Debian) or `pip install pgserver`"
    )


def _server_user() -> str | None:
    """The user to run the server as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "postgres"], check=True
        )
    return "postgres"


@dataclass
class LocalPostgres:
    """A running throwaway cluster. Use as a context manager or call stop()."""

    bin_dir: Path = field(default_factory=find_bin_dir)
    port: int = field(default_factory=free_port)
    base_dir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="pathkeeper-pg-"))
    )
    extra_settings: dict[str, str] = field(default_factory=dict)
    #: Start with ``LOGICAL_REPLICATION_SETTINGS`` (publisher and subscriber of a move).
    logical_replication: bool = False
    user: str | None = field(default_factory=_server_user)

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def superuser(self) -> str:
        return self.user or pwd.getpwuid(os.geteuid()).pw_name

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.superuser}@127.0.0.1:{self.port}/{dbname}"

    def _run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def start(self) -> LocalPostgres:
        if self.user:
            shutil.chown(self.base_dir, self.user)
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                ["initdb", "-D", str(self.data_dir), "-A", "trust", "-E", "UTF8",
                 "--locale=C", "-U", self.superuser]
            )
            with open(self.data_dir / "postgresql.conf", "a") as conf:
                logical = LOGICAL_REPLICATION_SETTINGS if self.logical_replication else {}
                for k, v in {**SERVER_SETTINGS, **logical, **self.extra_settings}.items():
                    conf.write(f"{k} = {v}\n")
        self.pg_ctl_start()
        return self

    def pg_ctl_start(self) -> None:
        self._run(
            ["pg_ctl", "-D", str(self.data_dir), "-l", str(self.base_dir / "server.log"),
             "-o", f"-p {self.port}", "-w", "-t", "60", "start"]
        )

    def pg_ctl_stop(self, mode: str = "fast") -> None:
        self._run(["pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop"], check=False)

    def create_database(self, name: str, template: str | None = None) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            sql = f'CREATE DATABASE "{name}"'
            if template:
                sql += f' TEMPLATE "{template}"'
            conn.execute(sql.encode())
        return self.url(name)

    def stop(self) -> None:
        self.pg_ctl_stop("immediate")
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
