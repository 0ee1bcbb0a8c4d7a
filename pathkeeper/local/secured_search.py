"""A throwaway Elasticsearch node with security on, as production clusters run: TLS on
its HTTP port with a certificate signed by a CA made for it, the ``elastic`` superuser's
password, and a user of limited rights. For tests, the demo and benchmarks of a
secured connection.

Elastic's integ-test distribution carries x-pack security; its own tools make the
certificates (``elasticsearch-certutil``), set the superuser's first password
(``elasticsearch-keystore``: ``bootstrap.password``) and add the limited user to the
file realm (``elasticsearch-users``; its role in ``roles.yml``). The distribution lacks
the analysis module the ``.security`` index needs (its ``email`` analyzer), so the
native realm and API keys, which live in that index, cannot be used on it: the server
can only check an API key and refuse it. OpenSearch's integ-test distribution has no
security plugin, so there is no secured OpenSearch node here.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
import subprocess
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from indexer.search_client import SearchSecurity
from pathkeeper.local.search_node import LocalSearchNode, distribution
from pathkeeper.local.server import LocalServerError

#: The role of ``SecuredSearchNode.user``: what Pathkeeper needs, no more. ``monitor``
#: reads the node's version and settings (the engine check, the request limit) and
#: cluster health; the indices are the aliases' own.
LIMITED_ROLE = "pathkeeper_indexer"


class SecuredSearchNode(LocalSearchNode):
    """A single Elasticsearch node (see ``LocalSearchNode``) on https, security on.

    ``ca_certs``: the PEM file of the CA that signs the node's certificate (for
    127.0.0.1 and localhost); ``password``: the ``elastic`` superuser's;
    ``user``/``user_password``: a user with the role ``LIMITED_ROLE`` on ``indices``
    (index name patterns). ``security(kind)`` is the ``SearchSecurity`` of each."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        port: int = 0,
        startup_timeout: float = 300.0,
        *,
        version: str | None = None,
        heap: str | None = None,
        indices: Sequence[str] = ("pathkeeper*", "pk-*"),
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(data_dir, port, startup_timeout, engine="elasticsearch",
                         version=version, heap=heap, settings={
                             "xpack.security.enabled": "true",
                             "xpack.security.http.ssl.enabled": "true",
                             "xpack.security.http.ssl.key": "certs/node/node.key",
                             "xpack.security.http.ssl.certificate": "certs/node/node.crt",
                             "xpack.security.http.ssl.certificate_authorities":
                                 "certs/ca/ca.crt",
                             "xpack.security.authc.api_key.enabled": "true",
                             **(settings or {}),
                         })
        self.label = f"{self.label} (secured)"
        self.indices = tuple(indices)
        self.password = secrets.token_urlsafe(18)
        self.user = "pathkeeper"
        self.user_password = secrets.token_urlsafe(18)

    @property
    def ca_certs(self) -> str:
        return str(self.data_dir / "config" / "certs" / "ca" / "ca.crt")

    def __repr__(self) -> str:
        return f"<{self.label} on {self.url or 'not started'}>"

    # ------------------------------------------------------------ set-up

    def command(self) -> tuple[list[str], dict[str, str], dict[str, Any]]:
        cmd, env, extra = super().command()
        self.url = f"https://127.0.0.1:{self.port}"
        conf = self.data_dir / "config"
        yml = conf / "elasticsearch.yml"
        off = set(self.engine.security_off)
        yml.write_text("".join(
            line for line in yml.read_text().splitlines(keepends=True)
            if line.rstrip("\n") not in off
        ))
        tools = distribution(self.release) / "bin"
        certs = conf / "certs"
        if not (certs / "node" / "node.crt").is_file():
            certs.mkdir(exist_ok=True)
            self._tool(env, tools / "elasticsearch-certutil", "ca", "--pem", "--silent",
                       "--days", "30", "--out", str(certs / "ca.zip"))
            _unzip(certs / "ca.zip", certs)
            self._tool(env, tools / "elasticsearch-certutil", "cert", "--pem", "--silent",
                       "--days", "30", "--ca-cert", str(certs / "ca" / "ca.crt"),
                       "--ca-key", str(certs / "ca" / "ca.key"), "--name", "node",
                       "--ip", "127.0.0.1", "--dns", "localhost",
                       "--out", str(certs / "node.zip"))
            _unzip(certs / "node.zip", certs)
        if not (conf / "elasticsearch.keystore").is_file():
            self._tool(env, tools / "elasticsearch-keystore", "create")
            self._tool(env, tools / "elasticsearch-keystore", "add", "-x",
                       "bootstrap.password", stdin=self.password)
            indices = ", ".join(json.dumps(pattern) for pattern in self.indices)
            (conf / "roles.yml").write_text(
                f"{LIMITED_ROLE}:\n"
                "  cluster: [monitor]\n"
                "  indices:\n"
                f"    - names: [{indices}]\n"
                "      privileges: [all]\n"
            )
            self._tool(env, tools / "elasticsearch-users", "useradd", self.user,
                       "-p", self.user_password, "-r", LIMITED_ROLE)
        if "user" in extra:
            for path in [self.data_dir, *self.data_dir.rglob("*")]:
                os.chown(path, extra["user"], extra["group"], follow_symlinks=False)
        return cmd, env, extra

    def _tool(self, env: dict[str, str], tool: Path, *args: str, stdin: str = "") -> None:
        # The node's heap is not the tool's.
        env = {**env, f"{self.engine.env}_JAVA_OPTS": "-Xms64m -Xmx256m"}
        done = subprocess.run([str(tool), *args], env=env, input=stdin.encode(),
                              capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode("utf-8", "replace")[-2000:]
            raise LocalServerError(f"{tool.name} {args[0]} failed: {output}")

    # ------------------------------------------------------------ use

    def security(self, kind: str = "basic") -> SearchSecurity:
        """How a client reaches the node: ``basic`` (the limited user) or
        ``superuser`` (``elastic``); each with the node's CA."""
        if kind == "superuser":
            return SearchSecurity(user="elastic", password=self.password, ca_certs=self.ca_certs)
        if kind == "basic":
            return SearchSecurity(user=self.user, password=self.user_password,
                                  ca_certs=self.ca_certs)
        raise ValueError(f"kind {kind!r}: expected basic or superuser")

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """A call as the ``elastic`` superuser; its JSON answer."""
        token = base64.b64encode(f"elastic:{self.password}".encode()).decode()
        request = urllib.request.Request(
            self.url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        )
        context = ssl.create_default_context(cafile=self.ca_certs)
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            answer = exc.read().decode("utf-8", "replace")[:500]
            raise LocalServerError(f"{method} {path} answered {exc.code}: {answer}") from None

    def _answers(self) -> bool:
        try:
            self.request("GET", self.health_path)
        except (LocalServerError, urllib.error.URLError, OSError, ValueError):
            return False
        return True


def _unzip(archive: Path, into: Path) -> None:
    with zipfile.ZipFile(archive) as z:
        z.extractall(into)
    archive.unlink()


__all__ = ["LIMITED_ROLE", "SecuredSearchNode"]
