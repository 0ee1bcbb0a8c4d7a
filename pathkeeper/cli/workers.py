"""``pathkeeper serve --workers N``: N uvicorn processes on one port, each listening on a
socket of its own (``SO_REUSEPORT``), so the kernel spreads new connections over them.

Not uvicorn's own ``--workers``: its processes share one listening socket, and each new
connection goes to whichever process wakes first and accepts everything pending. With 16
keep-alive clients connecting at once, all 16 landed on one of two workers in 2 of 4
tries on this project's machines (stat over HTTP ~1,900/s against ~3,100/s when split),
and keep-alive connections stay where they landed. With a socket per process the kernel
hashes each connection to one of them.

This process (the supervisor) binds the port first, without listening on it: a port in
use is refused here, once, and an ephemeral port (0) becomes one number for all. It starts
the workers, starts another when one dies (``kill -9``, an out-of-memory kill), and on
SIGINT or SIGTERM stops them (uvicorn's graceful shutdown) and waits; if it dies itself,
the kernel stops them (Linux). A worker that fails
its startup, or stops cleanly (a signal sent to the whole process group reaches the
workers too), ends the whole command, as a single server would.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from multiprocessing.process import BaseProcess
from types import FrameType

from indexer.logs import LogFormat, configure, current_format

log = logging.getLogger("pathkeeper.serve")

#: A worker's exit status when its server did not start (uvicorn's own).
STARTUP_FAILURE = 3
#: Seconds a stopping worker gets before it is killed.
STOP_GRACE = 30.0


def reuse_port_socket(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _end_with_parent(parent: int) -> None:
    """Have the kernel send SIGTERM to this process when its parent dies (Linux), so a
    supervisor killed with ``kill -9`` leaves no server behind holding the port."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request took effect
        sys.exit(0)


def worker(family: socket.AddressFamily, host: str, port: int, log_level: str,
           log_format: LogFormat, access_log: bool, parent: int) -> None:
    """One server process: its own listening socket, the app from the environment."""
    import uvicorn

    # A spawned process starts with no logging set up: the parent's, again.
    configure(getattr(logging, log_level.upper()), log_format)
    _end_with_parent(parent)
    sock = reuse_port_socket(family, host, port)
    config = uvicorn.Config("pathkeeper.http.app:app_from_environment", factory=True,
                            log_level=log_level, access_log=access_log, log_config=None)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def serve_workers(host: str, port: int, workers: int, log_level: str,
                  access_log: bool) -> int:
    """Run ``workers`` server processes on ``host:port`` until SIGINT or SIGTERM; the
    exit status (non-zero when a worker could not start)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    reserved = reuse_port_socket(family, host, port)  # OSError: the port is taken
    port = reserved.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    stop = threading.Event()

    def start() -> BaseProcess:
        proc = ctx.Process(target=worker, name="pathkeeper-serve",
                           args=(family, host, port, log_level, current_format(),
                                 access_log, os.getpid()))
        proc.start()
        return proc

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    procs = [start() for _ in range(workers)]
    status = 0
    try:
        while not stop.wait(0.5):
            for i, proc in enumerate(procs):
                if proc.is_alive():
                    continue
                if proc.exitcode == 0:  # stopped by a signal to the process group
                    stop.set()
                    break
                if proc.exitcode == STARTUP_FAILURE:
                    log.error("a server process could not start; stopping")
                    status = 1
                    stop.set()
                    break
                log.warning("server process %s ended (exit %s); starting another",
                            proc.pid, proc.exitcode)
                procs[i] = start()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(STOP_GRACE)
            if proc.is_alive():
                proc.kill()
                proc.join()
        reserved.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
