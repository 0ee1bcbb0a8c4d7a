"""A writer process of the multi-server simulation (``test_shards.py``), with its own
connections: ``python -m tests.simulation.sim_writer DIRECTORY_URL SEED GO LOG NS[,NS...]``
does random creates, writes, renames, moves and deletes on its own namespaces through a
``Coordinator`` over the directory. Once set up it logs ``ready`` and waits for the file
GO, which holds the wall-clock time to stop at (so that every writer's load starts
together). Each acknowledged write is one JSON line of LOG (namespace, node id, op,
resulting version, seq), flushed before the next call; a write whose outcome is unknown
is logged as such (its node may or may not have changed). A frozen namespace or a server
that is down is waited for and the same call sent again. The last line counts what it
did."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import IO, Any

from coordinator import Coordinator
from coordinator.commands import Command, CreateFile, Delete, Mkdir, Move, Rename, WriteFile
from coordinator.errors import NamespaceFrozen, NamespaceMoved, OutcomeUnknown, Unavailable

DIRS = ("/d0", "/d1", "/d2")
#: Live files kept per namespace: creates win below it, deletes above it.
TARGET_FILES = 12


class NamespaceModel:
    """What a writer knows its namespace holds: file path -> node id."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def resync(self, coord: Coordinator, ns: str) -> None:
        """Read the files again (after a call whose outcome is unknown)."""
        self.files = {n.path: str(n.id) for n in coord.walk(ns) if n.kind == "file"}


class Writer:
    def __init__(self, coord: Coordinator, namespaces: list[str], seed: int,
                 log: IO[str]) -> None:
        self.coord, self.namespaces, self.log = coord, namespaces, log
        self.rng = random.Random(seed)
        self.models = {ns: NamespaceModel() for ns in namespaces}
        self.counter = 0
        self.counts = {"acks": 0, "frozen": 0, "unavailable": 0, "unknown": 0}

    def _name(self) -> str:
        self.counter += 1
        return f"f{self.counter}"

    def _pick(self, ns: str) -> tuple[str, Command, str | None]:
        """(op, command, path of the node it changes or None for a create)."""
        files = self.models[ns].files
        rng = self.rng
        if len(files) < TARGET_FILES // 2 or (len(files) < TARGET_FILES and rng.random() < 0.3):
            path = f"{rng.choice(DIRS)}/{self._name()}"
            return "create", CreateFile(path, f"c{self.counter}"), None
        path = rng.choice(sorted(files))
        roll = rng.random()
        if roll < 0.5:
            return "write", WriteFile(path, f"w{self.counter} {rng.random()}"), path
        if roll < 0.65:
            return "rename", Rename(path, self._name()), path
        if roll < 0.8:
            dst = f"{rng.choice(DIRS)}/{self._name()}"
            return "move", Move(path, dst), path
        return "delete", Delete(path), path

    def _line(self, **fields: Any) -> None:
        self.log.write(json.dumps(fields) + "\n")
        self.log.flush()

    def setup(self) -> None:
        for ns in self.namespaces:
            for d in DIRS:
                self._send(ns, Mkdir(d, parents=True))
            self.models[ns].resync(self.coord, ns)

    def _send(self, ns: str, command: Command) -> Any:
        """The call's result, after waiting out a freeze or a server that is down; None
        when its outcome is unknown."""
        while True:
            try:
                return self.coord.execute(ns, command)
            except (NamespaceFrozen, NamespaceMoved):
                self.counts["frozen"] += 1
                time.sleep(0.05)
            except OutcomeUnknown:
                self.counts["unknown"] += 1
                return None
            except Unavailable:
                self.counts["unavailable"] += 1
                time.sleep(0.2)

    def step(self) -> None:
        ns = self.rng.choice(self.namespaces)
        model = self.models[ns]
        op, command, path = self._pick(ns)
        result = self._send(ns, command)
        if result is None:
            self._line(ns=ns, op="unknown", node=model.files.get(path or ""))
            while True:
                try:
                    model.resync(self.coord, ns)
                    return
                except Unavailable:
                    time.sleep(0.2)
        node = str(result.node.id)
        self._line(ns=ns, op=op, node=node, version=result.version, seq=result.seq)
        self.counts["acks"] += 1
        if path is not None:
            del model.files[path]
        if op != "delete":
            model.files[result.node.path] = node


def run_writer(directory_url: str, seed: int, go: Path, log_path: str,
               namespaces: list[str]) -> int:
    with Coordinator.connect(directory_url=directory_url, lock_timeout=5.0) as coord, \
            open(log_path, "a") as log:
        writer = Writer(coord, namespaces, seed, log)
        writer.setup()
        writer._line(ready=True)
        while not go.exists():
            time.sleep(0.02)
        until = float(go.read_text())
        began = time.time()
        while time.time() < until:
            writer.step()
        writer._line(done=True, seconds=time.time() - began, **writer.counts)
    return 0


def main(argv: list[str]) -> int:
    directory_url, seed, go, log_path, namespaces = argv
    return run_writer(directory_url, int(seed), Path(go), log_path, namespaces.split(","))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
