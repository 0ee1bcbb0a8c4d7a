"""``pathkeeper keys create|list|revoke`` and ``pathkeeper serve``'s refusal of --no-auth
on a non-loopback address."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time

import httpx
from click.testing import CliRunner

from coordinator import Coordinator
from coordinator.api_keys import hash_secret
from pathkeeper.cli.main import main
from pathkeeper.http.auth import Authenticator


def test_keys_create_list_revoke(database_url: str, coord: Coordinator) -> None:
    runner = CliRunner()
    env = {"PATHKEEPER_DATABASE_URL": database_url}
    created = runner.invoke(main, ["keys", "create", "--namespace", "a", "--namespace", "b",
                                   "--scope", "write", "--label", "svc"], env=env)
    assert created.exit_code == 0, created.output
    lines = dict(line.split(":", 1) for line in created.stdout.splitlines() if ":" in line)
    key_id, secret = lines["id"].strip(), lines["secret"].strip()
    principal = Authenticator(coord.engine, 0).authenticate(f"Bearer {secret}")
    assert (principal.scope, principal.namespaces) == ("write", ("a", "b"))
    with coord.engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT key_hash FROM api_keys").scalars().all()
    assert stored == [hash_secret(secret)] and secret not in stored  # hashed at rest

    listed = runner.invoke(main, ["keys", "list"], env=env)
    assert listed.exit_code == 0 and key_id in listed.output and secret not in listed.output
    assert "active" in listed.output
    revoked = runner.invoke(main, ["keys", "revoke", key_id], env=env)
    assert revoked.exit_code == 0, revoked.output
    assert "revoked" in runner.invoke(main, ["keys", "list"], env=env).output
    assert runner.invoke(main, ["keys", "revoke", key_id], env=env).exit_code == 1
    bad = runner.invoke(main, ["keys", "create", "--namespace", "bad name", "--scope", "read"],
                        env=env)
    assert bad.exit_code != 0


def test_serve_refuses_no_auth_off_loopback(database_url: str) -> None:
    result = CliRunner().invoke(main, ["serve", "--database-url", database_url, "--host",
                                       "0.0.0.0", "--no-auth"])
    assert result.exit_code == 2
    assert "--no-auth is refused" in result.output


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> set[int]:
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == pid:
                kids.add(int(entry))
    return kids


ESTABLISHED, LISTEN = "01", "0A"


def _sockets_by_process(port: int, pids: set[int], state: str) -> dict[int, set[str]]:
    """TCP sockets (inodes) on local ``port`` in ``state``, by the process holding them."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                    inodes.add(fields[9])
    held: dict[int, set[str]] = {}
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        mine = {link[8:-1] for link in links if link.startswith("socket:[")} & inodes
        if mine:
            held[pid] = mine
    return held


def _wait_listening(port: int, supervisor: int) -> None:
    """Until two processes under ``supervisor`` listen on ``port``."""
    deadline = time.monotonic() + 60
    while len(_sockets_by_process(port, _children(supervisor), LISTEN)) != 2:
        assert time.monotonic() < deadline, "two workers are not listening"
        time.sleep(0.2)


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "serve --workers 2 did not come up"
        time.sleep(0.2)


def _serve_two_workers(database_url: str) -> tuple[subprocess.Popen[bytes], int]:
    """``serve --workers 2 --no-auth`` in a session of its own, answering, both workers
    listening; and its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pathkeeper", "serve", "--database-url", database_url,
         "--no-auth", "--port", str(port), "--workers", "2", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}")
        _wait_listening(port, proc.pid)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc, port


def test_serve_with_two_workers_answers_from_both(database_url: str,
                                                  coord: Coordinator) -> None:
    """``serve --workers 2``: two real server processes behind one port, each with the
    settings of the command line (here --no-auth), both serving the same database; 16
    keep-alive connections opened at once are spread over both (each has a socket of its
    own), and a worker killed with ``kill -9`` is replaced."""
    proc, port = _serve_two_workers(database_url)
    try:
        url = f"http://127.0.0.1:{port}"
        # Connecting at once, as a client's pool does: with one shared listening socket the
        # first worker to wake accepts every pending connection.
        clients = [socket.socket() for _ in range(16)]
        for c in clients:
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
        connecting = list(clients)
        while connecting:
            _, connected, _ = select.select([], connecting, [], 10)
            assert connected, "connections not established"
            connecting = [c for c in connecting if c not in connected]
        try:
            for c in clients:
                c.setblocking(True)
            for c in clients:  # answered: accepted and served by a worker
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            for c in clients:
                assert c.recv(4096).startswith(b"HTTP/1.1 200")
            spread = _sockets_by_process(port, _children(proc.pid), ESTABLISHED)
        finally:
            for c in clients:
                c.close()
        assert sum(map(len, spread.values())) == 16 and len(spread) == 2, spread
        # Each worker listens on a socket of its own (a shared one is one inode in both).
        listening = list(_sockets_by_process(port, _children(proc.pid), LISTEN).values())
        assert len(listening) == 2 and not listening[0] & listening[1], listening

        victim = min(spread)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while victim in _children(proc.pid):
            assert time.monotonic() < deadline, "the killed worker is still there"
            time.sleep(0.2)
        _wait_listening(port, proc.pid)  # and the new one with it
        _wait_healthy(url)
        assert httpx.post(f"{url}/v1/namespaces", json={"name": "w"}).status_code == 201
        for i in range(20):
            r = httpx.post(f"{url}/v1/namespaces/w/dirs", json={"path": f"/d{i}"})
            assert r.status_code == 201, r.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert len(coord.listdir("w", "/")) == 20


def test_serve_with_workers_on_a_port_in_use_is_one_line(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "pathkeeper", "serve", "--database-url", database_url,
             "--no-auth", "--port", str(port), "--workers", "2"],
            capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_workers_end_with_a_killed_supervisor(database_url: str) -> None:
    """``kill -9`` of ``serve --workers 2`` itself: its workers stop too (none is left
    holding the port)."""
    proc, port = _serve_two_workers(database_url)
    try:
        workers = set(_sockets_by_process(port, _children(proc.pid), LISTEN))
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while alive := {pid for pid in workers if _running(pid)}:
            assert time.monotonic() < deadline, f"workers {alive} outlived their supervisor"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
