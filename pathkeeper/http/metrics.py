"""Prometheus metrics of the HTTP API, served at ``/metrics``: requests by method, route
template and status with their latency, requests in flight and refused (429) by limits
pool, and the build.

One registry per app (a process may build several). With ``serve --workers N`` each
process has its own: a scrape sees the process that answered it (label each target
by instance, or scrape with ``--workers 1``).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pathkeeper.http.errors import outage_message
from pathkeeper.http.route_table import leaf_routes

#: The route label of a request no route matched (404, 405): never the raw path.
UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: From a node read served from memory (~1 ms) to an import's hour.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0, 3600.0)
POOLS = ("short", "long_poll", "anonymous")


class SlotPool(Protocol):
    """What the metrics read of a limits pool."""

    @property
    def used(self) -> int: ...

    @property
    def total(self) -> int: ...


def package_version() -> str:
    try:
        return version("pathkeeper")
    except PackageNotFoundError:  # a checkout that was never installed
        return "unknown"


class _PoolCollector(Collector):
    """Slots in use and the cap of each pool, read at scrape time (nothing on the
    request path)."""

    def __init__(self, pools: dict[str, SlotPool]) -> None:
        self.pools = pools

    def collect(self) -> Iterable[Metric]:
        used = GaugeMetricFamily("pathkeeper_http_inflight",
                                 "Requests holding a slot of a limits pool", labels=["pool"])
        cap = GaugeMetricFamily("pathkeeper_http_inflight_limit",
                                "Slots of a limits pool (past it: 429)", labels=["pool"])
        for name, pool in self.pools.items():
            used.add_metric([name], pool.used)
            cap.add_metric([name], pool.total)
        yield used
        yield cap


class ServiceMetrics:
    """The app's metrics and their registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "pathkeeper_http_request_duration_seconds",
            "Requests answered, by method, route template and status, and their time "
            "from the request's arrival to the end of its answer",
            ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.overloaded = Counter(
            "pathkeeper_http_overloaded_total",
            "Requests refused with 429 because their limits pool (in all or for their "
            "caller) was full", ["pool"], registry=self.registry,
        )
        for pool in POOLS:
            self.overloaded.labels(pool)
        self.pools: dict[str, SlotPool] = {}
        self.registry.register(_PoolCollector(self.pools))
        Gauge("pathkeeper_build_info", "The running build: 1, labelled by version",
              ["version", "python"], registry=self.registry,
              ).labels(package_version(), platform.python_version()).set(1)
        ProcessCollector(registry=self.registry)

    def watch(self, name: str, pool: SlotPool) -> None:
        self.pools[name] = pool

    def exposition(self) -> tuple[bytes, str]:
        """The registry in Prometheus' text format, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def route_of(scope: Scope, routes: Callable[[Scope], list[BaseRoute]]) -> str:
    """The route template a request was served by, or would have been (one the limits
    refused before routing, from ``routes``): its label."""
    route = scope.get("route")  # FastAPI's router (or the fast path) leaves it there
    if route is None:
        route = next((r for r in routes(scope) if r.matches(scope)[0] == Match.FULL), None)
    path: str | None = getattr(route, "path", None)
    return path or UNMATCHED


class RequestMetrics:
    """Outermost middleware: times each HTTP request and counts it by method, route
    template and status, refusals by the limits included."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.requests = metrics.requests
        # The labelled children, found once: ``labels()`` checks and locks on every call.
        self._children: dict[tuple[str, str, int], Any] = {}
        self._routes: list[BaseRoute] | None = None

    def _leaf_routes(self, scope: Scope) -> list[BaseRoute]:
        if self._routes is None:  # the app's routes are all there by its first request
            self._routes = leaf_routes(getattr(scope.get("app"), "routes", ()))
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except Exception as exc:
            # What the app's last handler answers for it (``errors.install``).
            status = status or (503 if outage_message(exc) else 500)
            raise
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            key = (method, route_of(scope, self._leaf_routes), status or 499)
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self.requests.labels(method, key[1], str(key[2]))
            child.observe(time.perf_counter() - started)

