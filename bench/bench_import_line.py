"""One long import line, assembled from a streamed body: CPU seconds and peak memory.

    python bench/bench_import_line.py [--mb 32] [--chunk 65536]
    python bench/bench_import_line.py --http [--mb 32] [--code DIR]

The HTTP import hands ``coordinator.importer.iter_lines`` the body as it arrives, in
chunks of ``--chunk`` bytes (uvicorn reads 64 KB at a time). This feeds it one JSON line of
``--mb`` MB (a file whose content is that long) and a short line after it, and reports
the CPU time of assembling the lines and of parsing the long one (``parse_line``), and
the process's peak resident memory above what it held before, measured in a fresh
process per run. No database: this is the reader alone.

``--http`` measures the whole server instead: it starts its own PostgreSQL and
``pathkeeper serve`` (from ``--code``, a checkout, default this one: to compare two
versions of the server with the same client), posts the same body in ``--chunk`` byte
chunks to ``POST /v1/namespaces/{ns}/import``, and reports the answer, the server
process's CPU seconds for the request and its peak resident memory (VmHWM) against
its resident memory before the request.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from common import ROOT, load_average, migrated_cluster, now_utc, table


def chunks(mb: int, chunk: int) -> Iterator[bytes]:
    head = b'{"path": "/big", "kind": "file", "content": "'
    tail = b'"}\n{"path": "/small", "kind": "dir"}\n'
    yield head
    body = b"x" * chunk
    for _ in range(mb * 1024 * 1024 // chunk):
        yield body
    yield tail


def one_run(mb: int, chunk: int) -> dict[str, float]:
    from coordinator.importer import iter_lines, parse_line

    def rss_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    before = rss_mb()
    started = time.process_time()
    lines = iter_lines(chunks(mb, chunk), max_line_bytes=(mb + 1) * 1024 * 1024)
    first = next(lines)
    assembled = time.process_time() - started
    parse_line(first, 256)
    parsed = time.process_time() - started - assembled
    rest = list(lines)
    assert len(first) > mb * 1024 * 1024 and len(rest) == 1
    return {"assemble_s": assembled, "parse_s": parsed, "peak_mb": rss_mb() - before}


def proc_status(pid: int) -> dict[str, float]:
    """CPU seconds, resident and peak resident memory (MB) of process ``pid``."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines())
    return {"cpu_s": (int(stat[11]) + int(stat[12])) / ticks,
            "rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
            "hwm_mb": int(fields["VmHWM"].split()[0]) / 1024}


def http_run(mb: int, chunk: int, code: Path) -> list[object]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with migrated_cluster("bench_line") as (_, url):
        server = subprocess.Popen(
            [sys.executable, "-m", "pathkeeper", "serve", "--database-url", url, "--no-auth",
             "--port", str(port), "--log-level", "warning"],
            env={**os.environ, "PYTHONPATH": str(code)}, cwd=code, stdout=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    httpx.post(f"{base}/v1/namespaces", json={"name": "b"}).raise_for_status()
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            before = proc_status(server.pid)
            started = time.monotonic()
            r = httpx.post(f"{base}/v1/namespaces/b/import", content=chunks(mb, chunk),
                           headers={"Content-Type": "application/x-ndjson"}, timeout=None)
            wall = time.monotonic() - started
            after = proc_status(server.pid)
        finally:
            server.terminate()
            server.wait(30)
    return [r.status_code, f"{wall:.1f}", f"{after['cpu_s'] - before['cpu_s']:.2f}",
            f"{before['rss_mb']:.0f}", f"{after['hwm_mb']:.0f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--http", action="store_true", help="through a real server")
    ap.add_argument("--code", type=Path, default=ROOT, help="the server's checkout (--http)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.http:
        print(f"{now_utc()}  load {load_average()}  line {args.mb} MB, chunks of "
              f"{args.chunk} B, server from {args.code}")
        rows = [[r + 1, *http_run(args.mb, args.chunk, args.code)] for r in range(args.rounds)]
        print(table(["round", "status", "wall s", "server CPU s", "server RSS before MB",
                     "server peak RSS MB"], rows))
        print(f"load {load_average()}")
        return
    if args.child:
        print(json.dumps(one_run(args.mb, args.chunk)))
        return
    print(f"{now_utc()}  load {load_average()}  line {args.mb} MB, chunks of {args.chunk} B")
    rows = []
    for r in range(args.rounds):
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--mb", str(args.mb), "--chunk",
             str(args.chunk)], check=True, capture_output=True, text=True,
        )
        m = json.loads(out.stdout)
        rows.append([r + 1, f"{m['assemble_s']:.2f}", f"{m['parse_s']:.2f}",
                     f"{m['peak_mb']:.0f}"])
    print(table(["round", "assemble CPU s", "parse CPU s", "peak RSS above start MB"], rows))
    print(f"load {load_average()}")


if __name__ == "__main__":
    main()
