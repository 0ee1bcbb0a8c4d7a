"""The HTTP stack's own floor: server CPU per request of bare FastAPI routes shaped like
ours, with no database behind them, under the same load generator as ``bench_http.py``.

    python bench/fastapi_floor.py [--clients 16] [--seconds 5]

One uvicorn process (httptools, uvloop, no access log) serves a POST route with a JSON
body, a path parameter, a query parameter and a response model, in four variants:

* ``async``: an ``async def`` handler, nothing else;
* ``def``: a plain ``def`` handler, which FastAPI hands to a thread through anyio;
* ``executor``: an ``async def`` handler that runs its work with ``loop.run_in_executor``
  (what ``pathkeeper.http.threads.blocking`` does);
* ``executor + 8 dependencies``: as ``executor``, with a dependency tree the size of our
  command routes' (a bearer scheme, settings, authenticator, principal, scope check,
  coordinator, node reference, path declaration), each returning a constant.

The difference between a variant and ``async`` is what that piece costs per request;
our own routes' CPU per request (``bench_http.py``) minus ``executor + 8 dependencies``
is what our middleware, handlers and the coordinator add.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.security import HTTPBearer
from http_load import Script, drive, request
from pydantic import BaseModel

app = FastAPI()
_POOL = ThreadPoolExecutor(32)
_BEARER = HTTPBearer(auto_error=False)


class Body(BaseModel):
    name: str


class Out(BaseModel):
    node: dict[str, str]
    version: int
    seq: int | None


def _answer(path: str, name: str) -> dict[str, Any]:
    return {"node": {"path": path, "name": name}, "version": 1, "seq": 1}


@app.post("/v1/namespaces/{ns}/async", response_model=Out)
async def plain_async(ns: str, body: Body, path: str = Query()) -> dict[str, Any]:
    return _answer(path, body.name)


@app.post("/v1/namespaces/{ns}/def", response_model=Out)
def plain_def(ns: str, body: Body, path: str = Query()) -> dict[str, Any]:
    return _answer(path, body.name)


@app.post("/v1/namespaces/{ns}/executor", response_model=Out)
async def executor(ns: str, body: Body, path: str = Query()) -> dict[str, Any]:
    return await asyncio.get_running_loop().run_in_executor(_POOL, _answer, path, body.name)


async def _part(request: Request) -> int:
    return 1


async def _principal(creds: Annotated[Any, Depends(_BEARER)],
                     settings: Annotated[int, Depends(_part)]) -> int:
    return settings


async def _scope(ns: str, who: Annotated[int, Depends(_principal)]) -> int:
    return who


async def _auth(request: Request) -> int:
    return 2


async def _ref(request: Request) -> int:
    return 3


async def _declare(path: str = Query()) -> None:
    return None


@app.post("/v1/namespaces/{ns}/deps", response_model=Out, dependencies=[Depends(_declare)])
async def with_deps(
    ns: str, body: Body, who: Annotated[int, Depends(_scope)],
    auth: Annotated[int, Depends(_auth)], coord: Annotated[int, Depends(_part)],
    ref: Annotated[int, Depends(_ref)], path: str = Query(),
) -> dict[str, Any]:
    return await asyncio.get_running_loop().run_in_executor(_POOL, _answer, path, body.name)


VARIANTS = {"async": "async", "def": "def", "executor": "executor",
            "executor + 8 dependencies": "deps"}


def _cpu(pid: int) -> float:
    parts = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--port", type=int, default=18765)
    args = ap.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "fastapi_floor:app", "--port", str(args.port),
         "--log-level", "warning", "--no-access-log"], cwd=here,
    )
    try:
        time.sleep(3)
        host = f"127.0.0.1:{args.port}"
        headers = {"Content-Type": "application/json", "Authorization": "Bearer pk_x"}
        print(f"fastapi_floor: {args.clients} connections, {args.seconds:.0f} s each, "
              f"load {os.getloadavg()[0]:.2f}")
        for label, suffix in VARIANTS.items():
            scripts = [Script([request("POST", f"/v1/namespaces/b/{suffix}?path=/c{i}/sub",
                                       host, headers, b'{"name": "sub2"}')])
                       for i in range(args.clients)]
            drive("127.0.0.1", args.port, scripts, 1.0)  # warm-up
            before, started = _cpu(server.pid), time.time()
            latencies, errors, elapsed = drive("127.0.0.1", args.port, scripts, args.seconds)
            cpu = _cpu(server.pid) - before
            assert not errors, errors[:3]
            n = len(latencies)
            print(f"  {label:28s} {n / elapsed:7,.0f} req/s  server CPU "
                  f"{1000 * cpu / n:.3f} ms/request ({cpu / (time.time() - started):.2f} cores)")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
