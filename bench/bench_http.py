"""HTTP layer overhead: stat and rename with N concurrent clients against one
``pathkeeper serve`` process, side by side with the same operations through the
in-process ``Coordinator``, in the same run and on the same database.

    python bench/bench_http.py [--database-url URL] [--clients 16] [--seconds 5] [--bare]
                               [--code DIR --code DIR ...] [--rounds N]

Without ``--database-url`` a throwaway PostgreSQL cluster is started. In-process
clients are threads of this process sharing one ``Coordinator``; HTTP clients are
keep-alive connections of one lean asyncio process (``http_load.py``). On a small
machine both compete with the server and PostgreSQL for the same cores: read the
ratio, not the absolute numbers. ``--bare`` adds the ceiling for renames: the same
rename behind a bare ASGI app (``bare_rename_app.py``), with as many workers.

``--code DIR`` (repeatable) serves from each of several checkouts of the project (its
directory first on ``PYTHONPATH``), measured side by side in the same run, so two
versions of the server are compared under the same load; ``--rounds N`` repeats every
measurement N times, alternating, and reports the medians.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from http_load import Script, drive, request

from coordinator import Coordinator
from coordinator.api_keys import create_key
from coordinator.migrate import upgrade
from pathkeeper.local.ports import free_port
from pathkeeper.local.postgres import LocalPostgres

NS = "bench"


@dataclass
class Result:
    label: str
    count: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        return self.count / self.seconds

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run_clients(label: str, clients: int, seconds: float,
                make_op: Callable[[int], Callable[[int], None]]) -> Result:
    """``clients`` threads call their op in a loop for ``seconds``; latencies of each call."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    barrier = threading.Barrier(clients + 1)
    stop = threading.Event()

    def worker(i: int) -> None:
        op = make_op(i)
        barrier.wait()
        n = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                op(n)
            except Exception:
                errors[i] += 1
            latencies[i].append(time.perf_counter() - t0)
            n += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    time.sleep(seconds)  # the measurement window itself
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    flat = [x for per in latencies for x in per]
    return Result(label, len(flat), sum(errors), elapsed, flat)


def start_server(database_url: str, port: int, workers: int = 1,
                 bare: bool = False, code: str | None = None) -> subprocess.Popen[bytes]:
    """``pathkeeper serve`` (or, ``bare``, ``bare_rename_app``) on ``port``, started;
    ``code``: the checkout to serve from (default: as this interpreter imports it)."""
    env = {**os.environ, "PATHKEEPER_DATABASE_URL": database_url}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.abspath(code), os.environ.get("PYTHONPATH")) if p)
    if bare:
        command = [sys.executable, "-m", "uvicorn", "bare_rename_app:app",
                   "--app-dir", os.path.dirname(os.path.abspath(__file__)),
                   "--no-access-log", "--log-level", "warning"]
    else:
        command = [os.path.join(os.path.dirname(sys.executable), "pathkeeper"), "serve",
                   "--log-level", "warning",
                   "--max-inflight", "256", "--max-inflight-per-key", "256"]
    proc = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60  # a loaded shared machine starts slowly
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("pathkeeper serve did not start")
        time.sleep(0.05)  # polling a starting server: nothing to wait on


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", default="1,2",
                        help="server processes to measure, comma-separated (serve --workers)")
    parser.add_argument("--bare", action="store_true",
                        help="also serve the renames from bare_rename_app.py (the ceiling)")
    parser.add_argument("--code", action="append", default=[],
                        help="a checkout to serve from (repeatable: compared side by side)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure everything N times, alternating; report medians")
    args = parser.parse_args()
    codes: list[str | None] = args.code or [None]
    worker_counts = [int(w) for w in args.workers.split(",") if w]
    with ExitStack() as stack:
        url = args.database_url
        if url is None:
            pg = stack.enter_context(LocalPostgres())
            url = pg.create_database("bench_http")
        upgrade(url)
        coord = stack.enter_context(
            Coordinator.connect(url, pool_size=args.clients + 2, max_overflow=4))
        if NS in coord.namespaces():
            coord.drop_namespace(NS, force=True)
        coord.create_namespace(NS)
        for i in range(args.clients):
            coord.mkdir(NS, f"/c{i}/sub", parents=True)
            coord.create_file(NS, f"/c{i}/sub/file.txt", "x" * 200)
        _, secret = create_key(coord.engine, [NS], "write", label="bench")
        headers = {"Authorization": f"Bearer {secret}"}

        prefix = f"/v1/namespaces/{NS}"

        def http_stat(host: str, i: int) -> Script:
            target = f"{prefix}/node?path={quote(f'/c{i}/sub/file.txt')}"
            return Script([request("GET", target, host, headers)])

        def http_rename(host: str, i: int) -> Script:
            # /c{i}/sub <-> /c{i}/sub2, each client its own directory
            json = {"Content-Type": "application/json", **headers}
            return Script([
                request("POST", f"{prefix}/node/rename?path={quote(f'/c{i}/{src}')}", host,
                        json, f'{{"name": "{dst}"}}'.encode())
                for src, dst in (("sub", "sub2"), ("sub2", "sub"))
            ])

        def over_http(label: str, port: int, seconds: float,
                      script: Callable[[str, int], Script]) -> Result:
            host = f"127.0.0.1:{port}"
            latencies, errors, elapsed = drive(
                "127.0.0.1", port, [script(host, i) for i in range(args.clients)], seconds)
            if errors:
                raise RuntimeError(f"{label}: {len(errors)} failed requests, e.g. {errors[0]}")
            return Result(label, len(latencies), 0, elapsed, latencies)

        def coord_stat(i: int) -> Callable[[int], None]:
            return lambda _: (coord.stat(NS, f"/c{i}/sub/file.txt"), None)[1]

        def coord_rename(i: int) -> Callable[[int], None]:
            def op(n: int) -> None:
                src, dst = ("sub", "sub2") if n % 2 == 0 else ("sub2", "sub")
                coord.rename(NS, f"/c{i}/{src}", dst)
            return op

        def put_back() -> None:
            # A rename count may be odd: put every directory back before the next phase.
            for i in range(args.clients):
                if coord.listdir(NS, f"/c{i}")[0].name == "sub2":
                    coord.rename(NS, f"/c{i}/sub2", "sub")

        run_clients("warmup", args.clients, 1.0, coord_stat)
        results = []
        for name, via_http, in_process in (("stat", http_stat, coord_stat),
                                          ("rename", http_rename, coord_rename)):
            servers = [(w, False, code) for code in codes for w in worker_counts]
            if args.bare and name == "rename":
                servers += [(w, True, None) for w in worker_counts]
            for _ in range(args.rounds):
                c = run_clients(f"{name} in-process", args.clients, args.seconds, in_process)
                put_back()
                row = [c]
                for workers, bare, code in servers:
                    port = free_port()
                    server = start_server(url, port, workers, bare, code)
                    try:
                        over_http("warmup", port, 1.0, http_stat if not bare else via_http)
                        put_back()
                        label = (f"{name} {'bare ASGI' if bare else 'http'}, {workers} "
                                 f"worker(s){'' if code is None else ', ' + code}")
                        row.append(over_http(label, port, args.seconds, via_http))
                        put_back()
                    finally:
                        server.send_signal(signal.SIGTERM)
                        server.wait(10)
                results.append((name, row))

    print(f"{args.clients} concurrent clients, {args.seconds:.0f} s per measurement, "
          f"{args.rounds} round(s), {os.cpu_count()} CPUs (shared machine: numbers are noisy)")
    print(f"{'operation':<28}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
    ratios: dict[str, list[float]] = {}
    for _name, row in results:
        c = row[0]
        for r in row:
            print(f"{r.label:<28}{r.rps:>10.0f}{r.pct(0.5):>10.2f}{r.pct(0.99):>10.2f}"
                  f"{r.errors:>8}")
        for h in row[1:]:
            print(f"  {h.label} / in-process: {h.rps / c.rps:.2f}x throughput, "
                  f"p50 {h.pct(0.5) / c.pct(0.5):.1f}x")
            ratios.setdefault(h.label, []).append(h.rps / c.rps)
    if args.rounds > 1:
        print("medians over the rounds, HTTP / in-process throughput:")
        for label, values in ratios.items():
            print(f"  {label}: {statistics.median(values):.2f}x "
                  f"({', '.join(f'{v:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
