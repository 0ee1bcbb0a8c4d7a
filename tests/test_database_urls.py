"""Database URLs naming several hosts: libpq's URL form, its key=value form and
SQLAlchemy's form all reach the one host that accepts writes, for the coordinator,
its asyncio statements, the indexer's own connections and the CLI."""

from __future__ import annotations

import asyncio

import psycopg
import psycopg.conninfo
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from coordinator import Coordinator
from coordinator.async_statements import AsyncStatements
from coordinator.commands import Mkdir
from coordinator.db import libpq_url, parse_database_url
from coordinator.errors import InvalidConfiguration
from coordinator.settings import Settings
from indexer.leases import Leases
from pathkeeper.cli.main import main
from pathkeeper.local.ports import free_port


def _forms(database_url: str) -> dict[str, str]:
    """The database at ``database_url`` named three ways, behind a host that refuses
    connections (a dead node listed first)."""
    url = make_url(database_url)
    dead = free_port()
    assert url.host and url.port and url.database
    hosts = f"127.0.0.1:{dead},{url.host}:{url.port}"
    rw = "target_session_attrs=read-write"
    return {
        "libpq": f"postgresql://{url.username}@{hosts}/{url.database}?{rw}",
        "keywords": (f"host=127.0.0.1,{url.host} port={dead},{url.port} "
                     f"dbname={url.database} user={url.username} {rw}"),
        "sqlalchemy": (f"postgresql+psycopg://{url.username}@/{url.database}"
                       f"?host=127.0.0.1:{dead}&host={url.host}:{url.port}&{rw}"),
    }


@pytest.mark.parametrize("form", ["libpq", "keywords", "sqlalchemy"])
def test_every_client_connects_through_a_multi_host_url(database_url: str, form: str) -> None:
    url = _forms(database_url)[form]
    with Coordinator.connect(url) as coord:
        coord.create_namespace("multi")
        result = coord.execute("multi", Mkdir("/a"))
        assert coord.stat("multi", "/a").id == result.node.id

    async def async_stat() -> str:
        statements = AsyncStatements(url, Settings(), wake=lambda _ns: None)
        await statements.open()
        try:
            return (await statements.stat("multi", "/a")).path
        finally:
            await statements.close()

    assert asyncio.run(async_stat()) == "/a"

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM namespaces WHERE name = 'multi'").fetchone()
        assert row == (1,)
    leases = Leases(url, "urls")
    try:
        assert leases.join() == 0
    finally:
        leases.close()

    out = CliRunner().invoke(main, ["ns", "list"], env={"PATHKEEPER_DATABASE_URL": url})
    assert out.exit_code == 0, out.output
    assert "multi" in out.output


def test_mismatched_hosts_and_ports_are_refused() -> None:
    with pytest.raises(InvalidConfiguration, match="3 hosts but 2 ports"):
        parse_database_url("host=a,b,c port=1,2 dbname=x")
    with pytest.raises(InvalidConfiguration, match="port is not a number"):
        parse_database_url("postgresql://u@a:1,b:x/db")
    with pytest.raises(InvalidConfiguration, match="cannot be parsed"):
        parse_database_url("host=a dbname")


def test_a_socket_directory_stays_a_host() -> None:
    conninfo = libpq_url("host=/run/postgresql dbname=x user=y")
    assert psycopg.conninfo.conninfo_to_dict(conninfo) == {
        "host": "/run/postgresql", "dbname": "x", "user": "y"}
