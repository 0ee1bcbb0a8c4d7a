"""A random tree workload (creates, writes, renames, moves, deletes) for the replay tests."""

from __future__ import annotations

import random
import threading

from coordinator import Coordinator, CoordinatorError


def random_ops(coord: Coordinator, ns: str, n: int, seed: int, tag: str = "w") -> int:
    """Run ``n`` random operations on ``ns`` (errors from races are expected and
    skipped); returns how many succeeded."""
    rng = random.Random(seed)
    done = 0
    for i in range(n):
        try:
            entries = coord.listdir(ns, "/")
            dirs = ["/"] + [e.path for e in entries if e.kind == "dir"]
            # One level deeper, so moves and recursive deletes have subtrees to carry.
            for d in list(dirs[1:4]):
                dirs += [e.path for e in coord.listdir(ns, d) if e.kind == "dir"]
            files = [e.path for e in entries if e.kind == "file"]
            parent = rng.choice(dirs)
            base = "" if parent == "/" else parent
            roll = rng.random()
            if roll < 0.25:
                coord.mkdir(ns, f"{base}/{tag}d{seed}_{i}")
            elif roll < 0.55:
                coord.create_file(ns, f"{base}/{tag}f{seed}_{i}.txt", f"body {i} {rng.random()}",
                                  {"n": i, "tag": tag})
            elif roll < 0.7 and files:
                coord.write_file(ns, rng.choice(files), f"new {i}", {"w": i})
            elif roll < 0.85 and len(dirs) > 1:
                src = rng.choice(dirs[1:])
                dst = rng.choice(dirs)
                name = src.rsplit("/", 1)[1] + "r"
                coord.move(ns, src, f"{'' if dst == '/' else dst}/{name}")
            elif roll < 0.92 and files:
                coord.rename(ns, rng.choice(files), f"{tag}renamed{seed}_{i}.txt")
            elif len(dirs) > 3:
                coord.delete(ns, rng.choice(dirs[1:]), recursive=True)
            else:
                coord.create_file(ns, f"{base}/{tag}g{seed}_{i}", "x")
            done += 1
        except CoordinatorError:
            pass
    return done


def concurrent_ops(
    coord: Coordinator, namespaces: list[str], clients: int, ops_each: int, seed: int
) -> int:
    """``clients`` threads, each running ``random_ops`` on a namespace, at once."""
    results: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(clients)

    def client(k: int) -> None:
        try:
            start.wait()
            results.append(random_ops(coord, namespaces[k % len(namespaces)], ops_each,
                                      seed * 100 + k, tag=f"c{k}"))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(results)
