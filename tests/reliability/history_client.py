"""One client process of a concurrent history: random operations on overlapping
subtrees, every call and its result appended to a JSON-lines log.

The call line is written (and flushed to the kernel) before the call starts and
the result line after it returns, so a client killed with SIGKILL leaves at most
one call without a result: its in-flight operation, which may or may not have
committed. Kernel buffers survive the death of the process, so ``flush`` is
enough (no fsync: the machine does not crash, the process does).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

from coordinator import Coordinator
from coordinator.errors import CoordinatorError
from coordinator.results import MutationResult, Node

TOPS = ["s0", "s1"]
NAMES = ["a", "b", "c", "d"]

#: The event type each acknowledged mutation must have left at its seq.
EVENT_TYPE = {
    "mkdir": "created",
    "create_file": "created",
    "write_file": "written",
    "rename": "moved",
    "move": "moved",
    "delete": "deleted",
}


def random_path(rng: random.Random, min_extra: int = 0) -> str:
    parts = [rng.choice(TOPS)] + [rng.choice(NAMES) for _ in range(rng.randint(min_extra, 3))]
    return "/" + "/".join(parts)


def random_call(rng: random.Random, ids: list[str]) -> tuple[str, list[Any], dict[str, Any]]:
    """An operation name, its arguments after the namespace, and its keywords."""

    def ref() -> str:
        if ids and rng.random() < 0.3:
            return rng.choice(ids)
        return random_path(rng, min_extra=1)

    def version() -> dict[str, Any]:
        return {"if_version": rng.randint(1, 3)} if rng.random() < 0.2 else {}

    r = rng.random()
    if r < 0.10:
        return "mkdir", [random_path(rng, 1)], {}
    if r < 0.28:  # mkdir -p often, so that deep paths exist for the other operations
        return "mkdir", [random_path(rng, 1)], {"parents": True}
    if r < 0.43:
        return "create_file", [random_path(rng, 1), f"c{rng.randint(0, 9)}"], {}
    if r < 0.58:
        md = {"m": rng.randint(0, 9)} if rng.random() < 0.5 else None
        return "write_file", [ref(), f"w{rng.randint(0, 9)}", md], version()
    if r < 0.68:
        return "rename", [ref(), rng.choice(NAMES)], version()
    if r < 0.85:
        return "move", [ref(), random_path(rng, 1)], version()
    if r < 0.95:
        return "delete", [ref()], {"recursive": rng.random() < 0.5, **version()}
    return "stat", [random_path(rng)], {}


def describe(result: object) -> dict[str, Any]:
    if isinstance(result, MutationResult):
        n = result.node
        return {"seq": result.seq, "id": n.id, "kind": n.kind, "version": n.version,
                "path": n.path}
    if isinstance(result, Node):
        return {"seq": None, "id": result.id, "kind": result.kind, "version": result.version,
                "path": result.path}
    return {}


def client_main(url: str, ns: str, seed: int, stop_file: str, log_path: str) -> None:
    """Run random operations until ``stop_file`` exists."""
    rng = random.Random(seed)
    ids: list[str] = []
    with (
        Coordinator.connect(url, lock_timeout=2.0, pool_size=1, max_overflow=1) as coord,
        open(log_path, "a", encoding="utf-8") as log,
    ):
        n = 0
        while not os.path.exists(stop_file):
            op, args, kwargs = random_call(rng, ids)
            log.write(json.dumps({"call": n, "op": op, "args": args, "kw": kwargs}) + "\n")
            log.flush()
            rec: dict[str, Any] = {"ret": n}
            try:
                result = getattr(coord, op)(ns, *args, **kwargs)
                rec.update(ok=True, **describe(result))
                if "id" in rec:
                    ids.append(rec["id"])
                    del ids[:-20]
            except CoordinatorError as exc:
                rec.update(ok=False, err=type(exc).__name__, msg=str(exc)[:200])
            except Exception as exc:  # recorded, and counted as a violation by the checker
                rec.update(ok=False, crash=repr(exc)[:500])
            log.write(json.dumps(rec) + "\n")
            log.flush()
            n += 1
