"""One long import line, assembled from a streamed body: CPU seconds and peak memory.

    python bench/bench_import_line.py [--mb 32] [--chunk 65536]

The HTTP import hands ``coordinator.importer.iter_lines`` the body as it arrives, in
chunks of ``--chunk`` bytes (uvicorn reads 64 KB at a time). This feeds it one JSON line of
``--mb`` MB (a file whose content is that long) and a short line after it, and reports
the CPU time of assembling the lines and of parsing the long one (``parse_line``), and
the process's peak resident memory above what it held before, measured in a fresh
process per run. No database: this is the reader alone.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

from common import load_average, now_utc, table


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
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
