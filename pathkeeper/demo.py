"""The main job on embedded defaults: the seed's /clinton race, for real, end to end.

Starts a throwaway PostgreSQL and a local Elasticsearch-compatible server (unless
URLs are given), migrates, starts the indexer worker and the HTTP API on loopback,
builds the seed's tree, lets several clients rename concurrently (one renaming
/clinton back and forth while the others rename files inside it), checks the tree,
prints the event log, waits until the index has every change and searches it the
way the seed does: everything under the directory's final name.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import click

from coordinator import Coordinator, CoordinatorError
from coordinator.events import Moved
from coordinator.indexing import consumer_for
from coordinator.migrate import upgrade
from indexer.retention import format_duration
from pathkeeper.local.postgres import LocalPostgres

NS = "demo"


def build_tree(coord: Coordinator, files_per_dir: int = 5) -> None:
    coord.create_namespace(NS)
    for project in ("elasticsearch", "kibana", "logstash"):
        coord.mkdir(NS, f"/clinton/projects/{project}", parents=True)
        coord.create_file(NS, f"/clinton/projects/{project}/README.txt",
                          f"{project}: a file system in search")
        for i in range(files_per_dir):
            coord.create_file(NS, f"/clinton/projects/{project}/notes-{i}.txt",
                              f"note {i} about {project}")
    coord.mkdir(NS, "/archive")


def client(coord: Coordinator, role: int, stop: threading.Event, tally: Counter[str]) -> None:
    rnd = random.Random(role)
    while not stop.is_set():
        try:
            if role == 0:
                # The mass rename of the seed: the whole tree under a new name, O(1) rows.
                top = "/clinton" if _exists(coord, "/clinton") else "/bill"
                coord.rename(NS, top, "bill" if top == "/clinton" else "clinton")
                tally["directory renames"] += 1
            else:
                # Someone renaming one file inside it, by node id: no path to go stale.
                project = rnd.choice(["elasticsearch", "kibana", "logstash"])
                top = "/clinton" if _exists(coord, "/clinton") else "/bill"
                files = coord.listdir(NS, f"{top}/projects/{project}")
                node = rnd.choice(files)
                new = f"{node.name.split('.')[0].split('~')[0]}~{rnd.randint(0, 99)}.txt"
                coord.rename(NS, node.id, new)
                tally["file renames"] += 1
        except CoordinatorError as exc:
            # Expected in a race: the path we looked up was renamed under us.
            tally[f"refused: {type(exc).__name__}"] += 1


def _exists(coord: Coordinator, path: str) -> bool:
    try:
        coord.stat(NS, path)
        return True
    except CoordinatorError:
        return False


def own_alias(stack: ExitStack, es_url: str) -> str:
    """An index alias of this run's own, deleted with its indices at the end: a search
    server given with --es-url may hold other data (or another demo's) under the default
    alias, and the demo's searches must find only its own documents."""
    from indexer.elasticsearch_index import drop_alias_and_indices
    from indexer.search_client import open_search

    alias = f"pathkeeper-demo-{os.getpid()}"

    def drop() -> None:
        es = open_search(es_url)
        try:
            drop_alias_and_indices(es, alias)
        finally:
            es.close()

    stack.callback(drop)
    return alias


def start_worker(stack: ExitStack, database_url: str, es_url: str, alias: str) -> None:
    from indexer.worker import Worker, WorkerConfig

    worker = Worker(WorkerConfig(database_url, es_url, alias=alias, partitions=2,
                                 poll_interval=0.5))
    thread = threading.Thread(target=worker.run, name="indexer", daemon=True)
    thread.start()

    def stop() -> None:
        worker.stop()
        thread.join(30)

    stack.callback(stop)


def start_api(stack: ExitStack, database_url: str, es_url: str,
              alias: str) -> tuple[str, str]:
    """Serve the HTTP API on loopback; returns its URL and an admin key's secret."""
    import uvicorn

    from coordinator.api_keys import create_key
    from pathkeeper.http.app import create_app
    from pathkeeper.http.settings import ServiceSettings

    with Coordinator.connect(database_url) as coord:
        _, secret = create_key(coord.engine, [NS], "admin", "demo")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    app = create_app(ServiceSettings(database_url=database_url, es_url=es_url,
                                     index_alias=alias))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)

    def stop() -> None:
        server.should_exit = True
        thread.join(30)

    stack.callback(stop)
    return f"http://127.0.0.1:{port}", secret


def search_under(es_url: str, alias: str, top: str) -> list[dict[str, Any]]:
    """The seed's "everything under this directory": a term query on the tree field."""
    from indexer.contract import search_filters
    from indexer.search_client import open_search

    es = open_search(es_url)
    try:
        es.refresh(alias)
        hits = es.search(alias, {
            "query": {"bool": {"filter": search_filters(NS, top, kind="file")}},
            "sort": [{"path": "asc"}],
            "size": 100,
        }, routing=NS)["hits"]["hits"]
    finally:
        es.close()
    return [h["_source"] for h in hits]


def serve_until_stopped(serve_for: timedelta | None) -> None:
    """Keep the process (and so the API threads) alive until SIGINT or SIGTERM, or for
    ``serve_for``; saying so first, so whoever reads the URL knows how long it lives."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set())
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if serve_for is None:
            click.echo("serving until Ctrl-C or SIGTERM (--serve-for 10m bounds it, "
                       "--no-serve exits at once) ...")
        else:
            click.echo(f"serving for {format_duration(serve_for)} (or until Ctrl-C or "
                       "SIGTERM) ...")
        stop.wait(None if serve_for is None else serve_for.total_seconds())
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_demo(
    database_url: str | None, es_url: str | None, clients: int, seconds: float,
    serve: bool = True, serve_for: timedelta | None = None,
) -> int:
    """Run the demo; then, with ``serve``, keep the API up until a signal (or for
    ``serve_for``). The exit status: 0, or 1 when a check failed."""
    with ExitStack() as stack:
        if database_url is None:
            click.echo("starting a throwaway PostgreSQL cluster ...")
            pg = stack.enter_context(LocalPostgres())
            database_url = pg.create_database("pathkeeper")
        upgrade(database_url)
        if es_url is None:
            from pathkeeper.local.search import new_local_search, search_kind

            kind = search_kind()
            click.echo(f"starting a throwaway local search server ({kind}) ...")
            server = stack.enter_context(new_local_search())
            es_url = server.url
            click.echo(f"  {server.label} on {es_url}")
        coord = stack.enter_context(Coordinator.connect(database_url))
        build_tree(coord)
        alias = own_alias(stack, es_url)
        start_worker(stack, database_url, es_url, alias)
        api_url, secret = start_api(stack, database_url, es_url, alias)
        click.echo(f"{clients} clients renaming concurrently for {seconds:.0f}s ...")
        stop = threading.Event()
        tally: Counter[str] = Counter()
        threads = [
            threading.Thread(target=client, args=(coord, i, stop, tally)) for i in range(clients)
        ]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        for what, n in sorted(tally.items()):
            click.echo(f"  {what:>32}: {n}")
        nodes = list(coord.walk(NS))
        click.echo(f"final tree ({len(nodes)} nodes, every file still in place):")
        for node in nodes:
            click.echo(f"  {node.path}{'/' if node.is_dir and node.path != '/' else ''}")
        events, cursor = coord.read_events(limit=100_000)
        counts = Counter(e.type for e in events)
        by_type = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        click.echo(f"event log: {len(events)} events ({by_type}), cursor {cursor}; the last 8:")
        for e in events[-8:]:
            change = e.change
            detail = getattr(change, "path", "")
            if isinstance(change, Moved):
                detail = f"{change.old_path} -> {change.path}"
            click.echo(f"  {e.position:>12}  {e.type:<8} {detail}")
        expected_files = 3 * 6
        files = sorted(n.path for n in nodes if not n.is_dir)
        if len(files) != expected_files:
            click.echo(f"LOST FILES: {len(files)} != {expected_files}", err=True)
            return 1
        started = time.monotonic()
        if not coord.wait_indexed(cursor, timeout=60, consumer=consumer_for(alias)):
            click.echo("the indexer did not catch up within 60 s", err=True)
            return 1
        top = "/clinton" if any(p.startswith("/clinton/") for p in files) else "/bill"
        found = search_under(es_url, alias, top)
        click.echo(
            f"indexed up to {cursor} in {time.monotonic() - started:.2f}s after the last commit; "
            f"search tree={top!r} finds {len(found)} files:"
        )
        for doc in found:
            click.echo(f"  {doc['path']}")
        if sorted(doc["path"] for doc in found) != files:
            click.echo("SEARCH DOES NOT MATCH POSTGRESQL", err=True)
            return 1
        if not serve:
            click.echo("\n(--no-serve: the HTTP API stops now; without it the demo keeps "
                       "serving it)")
            return 0
        click.echo(f"\nHTTP API on {api_url} (docs: {api_url}/docs). Try:")
        click.echo(
            f"  curl -s -H 'Authorization: Bearer {secret}' "
            f"'{api_url}/v1/namespaces/{NS}/search?q=elasticsearch&under={top}'"
        )
        serve_until_stopped(serve_for)
    click.echo("stopped")
    return 0
