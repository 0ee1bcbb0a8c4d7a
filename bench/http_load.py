"""A lean HTTP/1.1 load generator for bench_http.py: keep-alive connections in one
asyncio process of its own, requests written as prepared bytes, responses read by
their Content-Length.

Why not httpx in threads: on a 2-vCPU machine the load generator shares the cores
with the server it measures, and httpx spends several times the server's own CPU per
request under the GIL, so the ratio measured was mostly the client's cost. This one
spends a few tens of microseconds per request, like the in-process side, which has no
client at all.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Script:
    """What one connection sends: its requests in turn, round and round (a rename and
    the rename back, or one stat). Each response must have status 200."""

    requests: Sequence[bytes]


def request(method: str, target: str, host: str, headers: dict[str, str],
            body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in
             headers.items()), f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode() + body


async def _connection(host: str, port: int, script: Script, start: float, deadline: float,
                      latencies: list[float], errors: list[str]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    n = 0
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            writer.write(script.requests[n % len(script.requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            if head[9:12] != b"200":
                errors.append(head[9:12].decode() + " " + body[:200].decode(errors="replace"))
            latencies.append(time.perf_counter() - t0)
            n += 1
    finally:
        writer.close()


async def _run(host: str, port: int, scripts: Sequence[Script],
               seconds: float) -> tuple[list[float], list[str], float]:
    latencies: list[float] = []
    errors: list[str] = []
    start = time.monotonic() + 0.2  # every connection open before the window starts
    tasks = [
        _connection(host, port, s, start, start + seconds, latencies, errors) for s in scripts
    ]
    await asyncio.gather(*tasks)
    return latencies, errors, time.monotonic() - start


def _child(host: str, port: int, scripts: Sequence[Script], seconds: float,
           out: mp.Queue[tuple[list[float], list[str], float]]) -> None:
    try:
        import uvloop  # the server's loop too, when installed
        uvloop.install()
    except ImportError:
        pass
    out.put(asyncio.run(_run(host, port, scripts, seconds)))


def drive(host: str, port: int, scripts: Sequence[Script],
          seconds: float) -> tuple[list[float], list[str], float]:
    """Run one connection per script for ``seconds`` from a process of its own; the
    latency of every request, the errors, and the window's length."""
    ctx = mp.get_context("spawn")
    out: mp.Queue[tuple[list[float], list[str], float]] = ctx.Queue()
    proc = ctx.Process(target=_child, args=(host, port, list(scripts), seconds, out))
    proc.start()
    try:
        result = out.get(timeout=seconds + 120)
    finally:
        proc.join(30)
    return result
