"""``pathkeeper keys create|list|revoke`` and ``pathkeeper serve``'s refusal of --no-auth
on a non-loopback address."""

from __future__ import annotations

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


def test_serve_with_two_workers_answers_from_both(database_url: str,
                                                  coord: Coordinator) -> None:
    """``serve --workers 2``: two real server processes behind one port, each with the
    settings of the command line (here --no-auth), both serving the same database."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pathkeeper", "serve", "--database-url", database_url,
         "--no-auth", "--port", str(port), "--workers", "2", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve --workers 2 did not come up"
            time.sleep(0.2)
        assert httpx.post(f"{url}/v1/namespaces", json={"name": "w"}).status_code == 201
        for i in range(20):  # fresh connections: the kernel spreads them over both
            r = httpx.post(f"{url}/v1/namespaces/w/dirs", json={"path": f"/d{i}"})
            assert r.status_code == 201, r.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert len(coord.listdir("w", "/")) == 20
