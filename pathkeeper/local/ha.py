"""A throwaway high-availability PostgreSQL cluster for tests and benchmarks: etcd and
three Patroni-managed PostgreSQL nodes on free loopback ports, with synchronous
replication (or asynchronous, to show what that loses).

``LocalHACluster().start()`` returns once a primary accepts writes and every standby
streams; ``url()`` is the multi-host URL clients use (libpq picks the primary with
``target_session_attrs=read-write``). ``kill_primary()`` kills the primary's postmaster
with SIGKILL (Patroni fails over at once: ``primary_start_timeout`` is 0) or, with
``whole_node=True``, its Patroni too (the others wait for its leader key to expire: the
``ttl``, 20 s, Patroni's minimum); ``switchover()`` is a planned change of primary.
``stop()`` kills every process it started, by process group (Patroni starts each
postmaster in a session of its own: those groups are killed too), and removes the
files.

Needs ``etcd`` (Debian: ``etcd-server``) on PATH and Patroni (``pip install
'pathkeeper[failover]'``); PostgreSQL's binaries as ``local.postgres`` finds them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from pathkeeper.local.ports import free_port
from pathkeeper.local.postgres import SERVER_SETTINGS, _server_user, find_bin_dir

#: The Patroni cluster's name (its key prefix in etcd).
SCOPE = "pathkeeper"
NODES = 3


class HAClusterError(RuntimeError):
    """The cluster did not reach the state asked for in time."""


@dataclass
class HANode:
    name: str
    pg_port: int
    api_port: int
    base_dir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (checked: its command line names this data
        directory, so a stale pid file never names another process)."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError):
            return None
        return pid if str(self.data_dir).encode() in cmdline else None


def _find_etcd() -> str:
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if not found:
        raise HAClusterError("etcd not found: install it (Debian: apt-get install etcd-server)")
    return found


def _patroni_command(user: str | None) -> tuple[list[str], dict[str, str]]:
    """How to run Patroni (as ``user`` when given): this interpreter with ``-m patroni``;
    if ``user`` cannot execute it (an interpreter under a private home), the system's
    interpreter of the same version with this one's packages on its path."""
    try:
        import patroni  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        raise HAClusterError("patroni not found: pip install 'pathkeeper[failover]'") from None
    env = dict(os.environ)
    python = sys.executable
    if user is not None and not _runs_as(user, python):
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        python = shutil.which(version, path="/usr/local/bin:/usr/bin") or ""
        if not python or not _runs_as(user, python):
            raise HAClusterError(f"no {version} that the user {user} may run, for Patroni")
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return [python, "-m", "patroni"], env


def _runs_as(user: str, python: str) -> bool:
    return subprocess.run(["runuser", "-u", user, "--", python, "-c", "pass"], cwd="/",
                          capture_output=True).returncode == 0


def _kill_group(pid: int) -> None:
    """SIGKILL the process group of ``pid`` (it and whatever it started)."""
    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class LocalHACluster:
    """Etcd plus ``NODES`` Patroni nodes; see the module docstring."""

    synchronous: bool = True
    #: PostgreSQL settings over the project's (``local.postgres.SERVER_SETTINGS``).
    extra_settings: dict[str, str] = field(default_factory=dict)
    base_dir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="pathkeeper-ha-"))
    )
    user: str | None = field(default_factory=_server_user)
    nodes: list[HANode] = field(default_factory=list)
    etcd_port: int = 0
    _etcd: subprocess.Popen[bytes] | None = None
    #: Seconds ``start`` took (etcd, bootstrap, two standbys streaming).
    start_seconds: float = 0.0

    # ------------------------------------------------------------------ start

    def start(self, timeout: float = 120.0) -> LocalHACluster:
        began = time.monotonic()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir.chmod(0o755)
        self._start_etcd()
        for i in range(NODES):
            node = HANode(f"node{i}", free_port(), free_port(), self.base_dir / f"node{i}")
            node.base_dir.mkdir()
            if self.user:
                shutil.chown(node.base_dir, self.user)
            self.nodes.append(node)
        try:
            for node in self.nodes:
                self._start_node(node)
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _start_etcd(self) -> None:
        self.etcd_port = free_port()
        peer = free_port()
        etcd = _find_etcd()
        with open(self.base_dir / "etcd.log", "wb") as log:  # the child keeps its own copy
            self._etcd = subprocess.Popen(
                [etcd, "--name", "etcd0", "--data-dir", str(self.base_dir / "etcd"),
                 "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                 "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", f"etcd0=http://127.0.0.1:{peer}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.etcd_port}/health", timeout=1).is_success:
                    return
            except httpx.HTTPError:
                pass
            if self._etcd.poll() is not None:
                break
            time.sleep(0.1)
        raise HAClusterError(f"etcd did not start: see {self.base_dir / 'etcd.log'}")

    def _config(self, node: HANode) -> dict[str, Any]:
        settings = {k: v.strip("'") for k, v in SERVER_SETTINGS.items()
                    if k not in ("listen_addresses", "unix_socket_directories")}
        return {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "WARNING", "dir": str(node.base_dir)},
            "restapi": {"listen": f"127.0.0.1:{node.api_port}",
                        "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    # Patroni's minimum ttl; a lost node's leader key expires after it.
                    "ttl": 20, "loop_wait": 1, "retry_timeout": 5,
                    # A crashed primary is not restarted in place: fail over at once.
                    "primary_start_timeout": 0,
                    "synchronous_mode": self.synchronous,
                    "maximum_lag_on_failover": 0 if self.synchronous else 16 * 1024 * 1024,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {**settings, "wal_keep_size": "256MB",
                                       **self.extra_settings},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(find_bin_dir()),
                "pgpass": str(node.base_dir / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
                "parameters": {"unix_socket_directories": str(node.base_dir)},
            },
            "tags": {"nofailover": False, "noloadbalance": False},
        }

    def _start_node(self, node: HANode) -> None:
        conf = node.base_dir / "patroni.json"  # JSON is YAML: Patroni reads it as such
        conf.write_text(json.dumps(self._config(node)))
        command, env = _patroni_command(self.user)
        cmd = [*command, str(conf)]
        if self.user:
            shutil.chown(conf, self.user)
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        with open(node.base_dir / "patroni.out", "wb") as log:
            node.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True,
                                            cwd=node.base_dir)

    # ----------------------------------------------------------------- state

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster (name, role, state, lag...), from any node."""
        for node in self.nodes:
            try:
                r = httpx.get(f"{node.api}/cluster", timeout=1)
                if r.is_success:
                    return list(r.json().get("members", []))
            except (httpx.HTTPError, ValueError):
                continue
        return []

    def primary(self) -> HANode | None:
        """The node Patroni names leader and whose PostgreSQL runs, if any."""
        for m in self.members():
            if m.get("role") in ("leader", "master", "primary") and m.get("state") == "running":
                return self._node(m["name"])
        return None

    def _node(self, name: str) -> HANode:
        return next(n for n in self.nodes if n.name == name)

    def wait_primary(self, timeout: float = 60.0, other_than: HANode | None = None) -> HANode:
        """The primary once one accepts writes (and is not ``other_than``)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.primary()
            if node is not None and node is not other_than:
                try:
                    with psycopg.connect(self.node_url(node), connect_timeout=2,
                                         autocommit=True) as conn:
                        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                        if row is not None and not row[0]:
                            return node
                except psycopg.Error:
                    pass
            time.sleep(0.2)
        raise HAClusterError(f"no primary within {timeout:.0f} s: {self.members()}")

    def wait_healthy(self, timeout: float = 120.0) -> HANode:
        """A primary, and every other node streaming (one of them synchronous when the
        cluster is)."""
        deadline = time.monotonic() + timeout
        primary = self.wait_primary(timeout)
        while time.monotonic() < deadline:
            ms = self.members()
            standbys = [m for m in ms if m.get("name") != primary.name]
            streaming = [m for m in standbys if m.get("state") in ("streaming", "running")
                         and m.get("role") in ("replica", "sync_standby", "quorum_standby")]
            sync_ok = (not self.synchronous
                       or any(m.get("role") == "sync_standby" for m in standbys))
            if len(streaming) == NODES - 1 and sync_ok:
                return primary
            time.sleep(0.2)
        raise HAClusterError(f"cluster not healthy within {timeout:.0f} s: {self.members()}")

    # --------------------------------------------------------------- clients

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL naming every node; libpq connects to whichever is the primary."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def node_url(self, node: HANode, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{node.pg_port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create ``name`` on the primary; its multi-host URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    # -------------------------------------------------------------- failures

    def kill_primary(self, whole_node: bool = False) -> HANode:
        """SIGKILL the primary's postmaster (and, with ``whole_node``, its Patroni
        first, as if the machine died); the node killed. Patroni then fails over (and
        brings the old primary back as a standby unless its whole node was killed). Waits
        first until every standby streams: killed earlier, with no synchronous standby
        yet, the primary would be restarted in place instead."""
        node = self.wait_healthy()
        if whole_node and node.process is not None:
            _kill_group(node.process.pid)
            node.process.wait()
        pid = node.postmaster_pid()
        if pid is None:
            raise HAClusterError(f"{node.name} has no postmaster.pid")
        _kill_group(pid)  # with its backends: Patroni's session for it
        return node

    def restart_node(self, node: HANode) -> None:
        """Start Patroni again on a node killed with ``whole_node`` (it rejoins as a
        standby, rewound if needed)."""
        if node.process is not None and node.process.poll() is None:
            return
        self._start_node(node)

    def switchover(self, timeout: float = 60.0) -> HANode:
        """A planned change of primary (to a synchronous standby); the new primary."""
        old = self.wait_healthy(timeout)
        r = httpx.post(f"{old.api}/switchover", json={"leader": old.name}, timeout=timeout)
        if not r.is_success:
            raise HAClusterError(f"switchover refused: {r.status_code} {r.text}")
        return self.wait_primary(timeout, other_than=old)

    # ------------------------------------------------------------ measuring

    def memory_bytes(self) -> int:
        """Resident memory of every process the cluster runs (etcd, Patroni, PostgreSQL)."""
        roots = [p.pid for p in [self._etcd, *(n.process for n in self.nodes)] if p]
        for n in self.nodes:
            if (pid := n.postmaster_pid()) is not None:
                try:
                    roots.append(os.getpgid(pid))
                except ProcessLookupError:
                    pass
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                pgid = int(stat[2])
                if pgid in roots:
                    rss = int((proc / "statm").read_text().split()[1])
                    total += rss * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, IndexError):
                continue
        return total

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Kill everything started (Patroni first, so it restarts nothing; then each
        postmaster's group; then etcd) and remove the files."""
        for node in self.nodes:
            if node.process is not None:
                _kill_group(node.process.pid)
                node.process.wait()
        for node in self.nodes:
            pid = node.postmaster_pid()
            if pid is not None:
                _kill_group(pid)
        if self._etcd is not None:
            _kill_group(self._etcd.pid)
            self._etcd.wait()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalHACluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
