"""Does the HTTP API's memory stay flat under a sustained mixed load?

Starts a throwaway PostgreSQL, one ``pathkeeper serve`` process (auth on, one admin
key) and 16 client threads doing a mixed workload over HTTP for ``--seconds``
(default 90): create, write, rename, stat, list, with Idempotency-Keys on half of
the writes (those rows are what could grow). Samples the server's RSS from /proc
every second and prints throughput, p50/p99 per operation and the RSS of the first
and last third of the run.

    python bench/bench_api_memory.py [--seconds 90] [--clients 16]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict

import httpx
from common import load_average, median, migrated_cluster, now_utc, percentile, table

from coordinator import Coordinator
from coordinator.api_keys import create_key
from pathkeeper.local.ports import free_port


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def client(base: str, key: str, ns: str, me: int, stop: threading.Event,
           lat: dict[str, list[float]], errors: dict[str, int], lock: threading.Lock) -> None:
    rnd = random.Random(me)
    headers = {"Authorization": f"Bearer {key}"}
    mine: list[str] = []
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        http.post(f"/v1/namespaces/{ns}/dirs", json={"path": f"/c{me}"})
        while not stop.is_set():
            op = rnd.choices(["create", "write", "rename", "stat", "list"],
                             weights=[25, 25, 15, 20, 15])[0]
            if op != "create" and not mine:
                op = "create"
            extra = {"Idempotency-Key": uuid.uuid4().hex} if rnd.random() < 0.5 else {}
            started = time.perf_counter()
            if op == "create":
                r = http.post(f"/v1/namespaces/{ns}/files", headers=extra,
                              json={"path": f"/c{me}/f{uuid.uuid4().hex[:12]}",
                                    "content": "x" * rnd.randint(10, 2000)})
                if r.status_code == 201:
                    mine.append(r.json()["node"]["id"])
            elif op == "write":
                r = http.put(f"/v1/namespaces/{ns}/nodes/{rnd.choice(mine)}/content",
                             headers=extra, json={"content": "y" * rnd.randint(10, 2000)})
            elif op == "rename":
                r = http.post(f"/v1/namespaces/{ns}/nodes/{rnd.choice(mine)}/rename",
                              headers=extra, json={"name": f"r{uuid.uuid4().hex[:12]}"})
            elif op == "stat":
                r = http.get(f"/v1/namespaces/{ns}/nodes/{rnd.choice(mine)}")
            else:
                r = http.get(f"/v1/namespaces/{ns}/node/children",
                             params={"path": f"/c{me}", "limit": 50})
            took = time.perf_counter() - started
            with lock:
                lat[op].append(took)
                if r.status_code >= 400:
                    errors[f"{op} {r.status_code}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    print(f"{now_utc()}  load {load_average()}  {args.clients} clients, {args.seconds:.0f} s")
    with migrated_cluster("apimem") as (_pg, url):
        ns = "load"
        with Coordinator.connect(url) as coord:
            coord.create_namespace(ns)
            _, key = create_key(coord.engine, [ns], "write", "bench")
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "pathkeeper", "serve", "--database-url", url,
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
             "--max-inflight-per-key", "64"],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            stop = threading.Event()
            lat: dict[str, list[float]] = defaultdict(list)
            errors: dict[str, int] = defaultdict(int)
            lock = threading.Lock()
            threads = [threading.Thread(target=client,
                                        args=(base, key, ns, i, stop, lat, errors, lock))
                       for i in range(args.clients)]
            for t in threads:
                t.start()
            samples: list[float] = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                samples.append(rss_mib(server.pid))
                time.sleep(1.0)
            stop.set()
            for t in threads:
                t.join(60)
        finally:
            server.terminate()
            server.wait(30)
    total = sum(len(v) for v in lat.values())
    print(f"{total} requests, {total / args.seconds:.0f} req/s; errors: {dict(errors) or 'none'}")
    print(table(["op", "n", "p50 ms", "p99 ms"],
                [[op, len(v), f"{median(v) * 1000:.1f}", f"{percentile(v, 0.99) * 1000:.1f}"]
                 for op, v in sorted(lat.items())]))
    third = max(1, len(samples) // 3)
    first, last = median(samples[:third]), median(samples[-third:])
    print(f"server RSS MiB: start {samples[0]:.1f}, first third median {first:.1f}, "
          f"last third median {last:.1f} ({(last / first - 1) * 100:+.1f} %), "
          f"max {max(samples):.1f}")


if __name__ == "__main__":
    main()
