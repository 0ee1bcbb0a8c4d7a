"""A real Elasticsearch node, fetched from Maven Central and run as a throwaway.

Elastic publishes a runnable node to Maven Central for integration tests:
``org.elasticsearch.distribution.integ-test-zip:elasticsearch:<version>:zip``, the
server with the transport module and x-pack core/security, without a bundled JDK
and without optional modules (no ``analysis-common``, no ``reindex``). It is
downloaded once (by ``mvn dependency:copy`` when Maven is installed, else straight
from Maven Central), checked against the pinned SHA-256 and unpacked into a cache.

Each ``LocalElasticsearch`` is a single node on 127.0.0.1 on free ports
(single-node discovery, security off, disk watermarks off so a nearly full test
disk does not turn indices read-only), with its configuration, data and logs in a
temporary directory. Elasticsearch refuses to run as root; as root the node runs
as an unprivileged user (``nobody`` unless ``PATHKEEPER_ES_USER`` names another).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pathkeeper.local.server import LocalServer, LocalServerError, free_port

#: The Elasticsearch version the project is tested with, and its archive's SHA-256.
ELASTICSEARCH_VERSION = "8.19.21"
PINNED_SHA256 = {
    "8.19.21": "215d5f3dbf0609a149f6218a9e47b6ae2df34ebbff3c5754e35f15a5e5393c8a",
}
GROUP = "org.elasticsearch.distribution.integ-test-zip"
ARTIFACT = "elasticsearch"
CENTRAL = "https://repo1.maven.org/maven2"
#: Oldest JDK the 8.x server runs on.
MIN_JAVA = 17


def cache_dir() -> Path:
    """Where downloaded distributions live. As root it must be readable by the
    unprivileged user the node runs as, so not under /root."""
    if os.environ.get("PATHKEEPER_CACHE_DIR"):
        return Path(os.environ["PATHKEEPER_CACHE_DIR"])
    if os.geteuid() == 0:
        return Path("/var/cache/pathkeeper")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pathkeeper"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes fetching the same distribution at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(version: str, into: Path) -> Path:
    """The archive of ``version`` in ``into``: by Maven when it is installed (its
    local repository doubles as a cache and honours the machine's mirror settings),
    else over HTTPS from Maven Central."""
    name = f"{ARTIFACT}-{version}.zip"
    mvn = shutil.which("mvn")
    if mvn:
        result = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy",
             f"-Dartifact={GROUP}:{ARTIFACT}:{version}:zip", f"-DoutputDirectory={into}"],
            capture_output=True, text=True, cwd=into,
        )
        if result.returncode == 0 and (into / name).is_file():
            return into / name
    url = f"{CENTRAL}/{GROUP.replace('.', '/')}/{ARTIFACT}/{version}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(into / name, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    except OSError as exc:
        raise LocalServerError(
            f"cannot download Elasticsearch {version} from {url}: {exc}"
        ) from exc
    return into / name


def _unpack(archive: Path, into: Path) -> None:
    """Unzip keeping the executable bits (zipfile alone drops them)."""
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            target = Path(z.extract(info, into))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode | 0o444 | (0o111 if target.is_dir() else 0))
            elif target.is_dir():
                target.chmod(0o755)


def distribution(version: str = ELASTICSEARCH_VERSION) -> Path:
    """The unpacked distribution of ``version`` (its ES_HOME), fetched on first use."""
    root = cache_dir()
    home = root / f"elasticsearch-{version}"
    if (home / "bin" / "elasticsearch").is_file():
        return home
    with _locked(root / f".elasticsearch-{version}.lock"):
        if (home / "bin" / "elasticsearch").is_file():
            return home
        work = Path(tempfile.mkdtemp(prefix=f".elasticsearch-{version}-", dir=root))
        try:
            archive = _download(version, work)
            want = PINNED_SHA256.get(version)
            got = _sha256(archive)
            if want is not None and got != want:
                raise LocalServerError(
                    f"Elasticsearch {version} archive has SHA-256 {got}, expected {want}"
                )
            _unpack(archive, work / "unpacked")
            (work / "unpacked" / f"elasticsearch-{version}").rename(home)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        root.chmod(0o755)
    return home


def _java_major(home: Path) -> int | None:
    try:
        release = (home / "release").read_text()
    except OSError:
        return None
    match = re.search(r'JAVA_VERSION="(\d+)', release)
    return int(match.group(1)) if match and (home / "bin" / "java").is_file() else None


def find_java() -> Path:
    """A JDK the node runs on: ``ES_JAVA_HOME`` or ``JAVA_HOME`` when set, else the
    oldest JDK of at least ``MIN_JAVA`` under /usr/lib/jvm (the 8.x line is tested
    most on LTS releases; a newer JDK is a fallback)."""
    for var in ("ES_JAVA_HOME", "JAVA_HOME"):
        if os.environ.get(var):
            home = Path(os.environ[var])
            major = _java_major(home)
            if major is None or major < MIN_JAVA:
                raise LocalServerError(f"{var}={home} is not a JDK {MIN_JAVA} or newer")
            return home
    found: list[tuple[int, str, Path]] = []
    jvm = Path("/usr/lib/jvm")
    if jvm.is_dir():
        for home in jvm.iterdir():
            major = _java_major(home.resolve())
            if major is not None and major >= MIN_JAVA:
                found.append((major, str(home.resolve()), home.resolve()))
    java = shutil.which("java")
    if java:
        home = Path(java).resolve().parent.parent
        major = _java_major(home)
        if major is not None and major >= MIN_JAVA:
            found.append((major, str(home), home))
    if not found:
        raise LocalServerError(
            f"no JDK {MIN_JAVA}+ found: set ES_JAVA_HOME (Elasticsearch's test "
            "distribution carries no JDK of its own), or PATHKEEPER_SEARCH=noida to use "
            "the stand-in"
        )
    return min(found)[2]


def _run_as() -> pwd.struct_passwd | None:
    """The user the node runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("PATHKEEPER_ES_USER", "nobody")
    try:
        return pwd.getpwnam(name)
    except KeyError as exc:
        raise LocalServerError(
            f"Elasticsearch refuses to run as root and user {name!r} does not exist "
            "(set PATHKEEPER_ES_USER)"
        ) from exc


class LocalElasticsearch(LocalServer):
    """A running single-node Elasticsearch (see ``LocalServer``)."""

    label = "Elasticsearch"
    health_path = "/_cluster/health?wait_for_status=yellow&timeout=1s"

    def __init__(
        self,
        data_dir: str | Path | None = None,
        port: int = 0,
        startup_timeout: float = 180.0,
        *,
        version: str | None = None,
        heap: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """``settings``: more lines of ``elasticsearch.yml`` (e.g. a small
        ``http.max_content_length`` to meet the server's request limit in a test)."""
        super().__init__(data_dir, port, startup_timeout)
        self.settings = dict(settings or {})
        self.version = version or os.environ.get("PATHKEEPER_ES_VERSION", ELASTICSEARCH_VERSION)
        self.heap = heap or os.environ.get("PATHKEEPER_ES_HEAP", "1g")
        self.transport_port = 0

    def command(self) -> tuple[list[str], dict[str, str], dict[str, Any]]:
        home = distribution(self.version)
        java = find_java()
        user = _run_as()
        if not self.port:
            self.port = free_port()
        if not self.transport_port:
            self.transport_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        node = self.data_dir
        conf = node / "config"
        if not conf.is_dir():
            shutil.copytree(home / "config", conf)
        (conf / "elasticsearch.yml").write_text("\n".join([
            "cluster.name: pathkeeper-local",
            "node.name: local",
            "discovery.type: single-node",
            "network.host: 127.0.0.1",
            f"http.port: {self.port}",
            f"transport.port: {self.transport_port}",
            "xpack.security.enabled: false",
            f"path.data: {node / 'data'}",
            f"path.logs: {node / 'logs'}",
            "cluster.routing.allocation.disk.threshold_enabled: false",
            *(f"{key}: {value}" for key, value in self.settings.items()),
            "",
        ]))
        for sub in ("data", "logs", "tmp"):
            (node / sub).mkdir(exist_ok=True)
        extra: dict[str, Any] = {"cwd": str(node)}
        if user is not None:
            for path in [node, *node.rglob("*")]:
                os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
            extra.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "ES_JAVA_HOME": str(java),
            "ES_PATH_CONF": str(conf),
            "ES_TMPDIR": str(node / "tmp"),
            "ES_JAVA_OPTS": f"-Xms{self.heap} -Xmx{self.heap}",
            "LANG": "C.UTF-8",
        }
        if user is not None:
            env["HOME"] = str(node)
        return [str(home / "bin" / "elasticsearch")], env, extra
