"""A throwaway cluster of real search nodes (Elasticsearch or OpenSearch) on 127.0.0.1:
``LocalSearchNode`` processes of one engine and version that find each other on their
fixed transport ports and form one cluster, every node master-eligible and a data node.

Each node can be killed (``kill -9`` of its process group) and started again on the
same ports and data directory, where it rejoins the cluster: how tests lose a node
holding primaries in the middle of a load. Three nodes keep a quorum of masters when
one dies (two of three); a two-node cluster has none after losing either, so it stops
answering writes until the node is back.

The nodes start at once, in threads: a node answers its cluster's health only when a
quorum has elected a master, so started one by one the first would wait for nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from pathkeeper.local.ports import free_port
from pathkeeper.local.search_node import LocalSearchNode
from pathkeeper.local.server import LocalServerError

#: Small heaps: a cluster of three shares a small machine with its tests.
CLUSTER_HEAP = "512m"
#: Start-up is most of a cluster test's time, and several JVMs start at once on few
#: cores: the quick compiler only, and thread pools sized for one core each.
CLUSTER_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)
CLUSTER_SETTINGS = {"node.processors": "1"}


class ClusterNode(LocalSearchNode):
    """One node of a ``LocalSearchCluster``: named, with a fixed transport port, seeded
    with its peers' transport ports."""

    #: The node's own view of the cluster's health, which it answers as soon as it
    #: runs, master elected or not (the cluster's health is awaited once every node
    #: runs). Not ``GET /``: Elastic's test distribution has no handler for it.
    health_path = "/_cluster/health?local=true"

    def __init__(self, cluster: LocalSearchCluster, index: int, data_dir: Path) -> None:
        super().__init__(data_dir, free_port(), cluster.startup_timeout,
                         engine=cluster.engine, version=cluster.version, heap=cluster.heap,
                         settings={**CLUSTER_SETTINGS, **cluster.settings},
                         java_options=CLUSTER_JAVA_OPTIONS)
        self.cluster = cluster
        self.name = f"node-{index}"
        self.transport_port = free_port()
        self.label = f"{self.label} {self.name}"

    def discovery_lines(self) -> list[str]:
        names = ", ".join(n.name for n in self.cluster.nodes)
        seeds = ", ".join(f'"127.0.0.1:{n.transport_port}"' for n in self.cluster.nodes)
        # OpenSearch renamed master to cluster manager (the old name is deprecated in
        # 2.x and gone from 3.x).
        bootstrap = ("cluster.initial_cluster_manager_nodes"
                     if self.engine.name == "opensearch" else "cluster.initial_master_nodes")
        return [
            f"cluster.name: {self.cluster.name}",
            f"node.name: {self.name}",
            f"discovery.seed_hosts: [{seeds}]",
            f"{bootstrap}: [{names}]",
        ]


class LocalSearchCluster:
    """``size`` nodes of ``engine``/``version`` forming one cluster; ``.url`` is the
    first node's HTTP address, ``.nodes`` the nodes (each with ``.url``, ``.name``,
    ``kill()``, ``start()``). Use as a context manager, or ``start()``/``close()``."""

    def __init__(
        self,
        size: int = 3,
        *,
        engine: str = "elasticsearch",
        version: str | None = None,
        heap: str = CLUSTER_HEAP,
        settings: dict[str, str] | None = None,
        data_dir: str | Path | None = None,
        startup_timeout: float = 240.0,
    ) -> None:
        if size < 1:
            raise LocalServerError(f"a cluster needs at least one node, not {size}")
        self.engine = engine
        self.version = version
        self.heap = heap
        self.settings = dict(settings or {})
        self.startup_timeout = startup_timeout
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="pathkeeper-cluster-"))
        # Traversable by the unprivileged user the nodes run as when we are root.
        self.data_dir.chmod(0o755)
        self.name = f"pathkeeper-cluster-{os.getpid()}-{free_port()}"
        self.nodes: list[ClusterNode] = []
        for i in range(size):
            self.nodes.append(ClusterNode(self, i, self.data_dir / f"node-{i}"))
        self.label = f"{self.nodes[0].release.engine.label} {self.nodes[0].version} " \
                     f"cluster of {size}"

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def node(self, name: str) -> ClusterNode:
        """The node called ``name`` (``node-0``...)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def start(self) -> str:
        """Start every node at once and wait until all of them formed the cluster;
        returns the first node's URL."""
        errors: list[BaseException] = []

        def start(node: ClusterNode) -> None:
            try:
                node.start()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(n,), name=f"start-{n.name}")
                   for n in self.nodes if not n.running]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]
        self.wait_formed()
        return self.url

    def health(self, via: ClusterNode | None = None, **params: str) -> dict[str, Any]:
        """``GET _cluster/health`` with ``params``, asked of ``via`` (default: any
        running node)."""
        node = via or next(n for n in self.nodes if n.running)
        query = "&".join(f"{k}={v}" for k, v in params.items())
        try:
            with urllib.request.urlopen(f"{node.url}/_cluster/health?{query}",
                                        timeout=70) as resp:
                return dict(json.load(resp))
        except urllib.error.HTTPError as exc:  # 408: the wait timed out; the body says
            return dict(json.load(exc))

    def wait_formed(self, timeout: float | None = None) -> None:
        """Wait until every running node is in the cluster (and a master elected)."""
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        running = [n for n in self.nodes if n.running]
        while True:
            try:
                got = self.health(running[0], wait_for_nodes=str(len(running)),
                                  timeout="10s")
                if not got.get("timed_out", True):
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise LocalServerError(
                    f"{self.label} did not form within the time allowed; last output of "
                    f"{running[0].name}:\n{running[0].output_tail()}")
            time.sleep(0.5)  # nodes still electing: nothing to wait on but the next ask

    def stop(self) -> None:
        """Stop every node (at once: each takes seconds to shut down)."""
        threads = [threading.Thread(target=n.stop, name=f"stop-{n.name}") for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def close(self) -> None:
        """Stop every node and remove the cluster's directory if we created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalSearchCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
