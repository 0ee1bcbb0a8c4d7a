"""The main job on embedded defaults: the seed's /clinton race, for real.

Starts a throwaway PostgreSQL (unless a database URL is given), migrates it, builds
the seed's tree, lets several clients rename and move concurrently (one of them
renaming /clinton back and forth while others rename files inside it), then
checks the tree and prints the event log.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from contextlib import ExitStack

import click

from . import Coordinator, CoordinatorError
from .local_postgres import LocalPostgres
from .migrate import upgrade

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


def run_demo(database_url: str | None, clients: int, seconds: float) -> int:
    with ExitStack() as stack:
        if database_url is None:
            click.echo("starting a throwaway PostgreSQL cluster ...")
            pg = stack.enter_context(LocalPostgres())
            database_url = pg.create_database("pathkeeper")
        upgrade(database_url)
        coord = stack.enter_context(Coordinator.connect(database_url))
        build_tree(coord)
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
        click.echo(f"event log: {len(events)} events {dict(counts)}, cursor {cursor}; the last 8:")
        for e in events[-8:]:
            detail = e.payload.get("path", "")
            if e.type == "moved":
                detail = f"{e.payload['old_path']} -> {e.payload['path']}"
            click.echo(f"  {e.position:>12}  {e.type:<8} {detail}")
        expected_files = 3 * 6
        files = sum(1 for n in nodes if not n.is_dir)
        if files != expected_files:
            click.echo(f"LOST FILES: {files} != {expected_files}", err=True)
            return 1
    return 0
