"""A real search node (Elasticsearch or OpenSearch), fetched from Maven Central and run
as a throwaway.

Both projects publish a runnable node to Maven Central for integration tests:
``org.elasticsearch.distribution.integ-test-zip:elasticsearch:<version>:zip`` and
``org.opensearch.distribution.integ-test-zip:opensearch:<version>:zip``, the server with
its transport module (Elastic's with x-pack core/security), without a bundled JDK and
without optional modules (no ``analysis-common``, no ``reindex``, no security plugin in
OpenSearch's). A distribution is downloaded once (by ``mvn dependency:copy`` when Maven
is installed, else straight from Maven Central), checked against the pinned SHA-256 and
unpacked into a cache.

Each ``LocalSearchNode`` is a single node on 127.0.0.1 on free ports (single-node
discovery, security off, disk watermarks off so a nearly full test disk does not turn
indices read-only), with its configuration, data and logs in a temporary directory, on
the oldest installed JDK its version runs on. Both servers refuse to run as root; as
root the node runs as an unprivileged user (``nobody`` unless ``PATHKEEPER_ES_USER``
names another).
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pathkeeper.local.ports import free_port
from pathkeeper.local.server import LocalServer, LocalServerError


@dataclass(frozen=True)
class Engine:
    """A search engine family: where Maven Central has it and how its launcher is set up."""

    name: str
    label: str
    group: str
    #: Prefix of the launcher's environment variables (``ES_JAVA_HOME``, ...).
    env: str
    #: Lines of the node's configuration that turn security off (none where the
    #: integ-test distribution has no security plugin).
    security_off: tuple[str, ...]

    @property
    def artifact(self) -> str:
        return self.name


ELASTICSEARCH = Engine("elasticsearch", "Elasticsearch",
                       "org.elasticsearch.distribution.integ-test-zip", "ES",
                       ("xpack.security.enabled: false",))
OPENSEARCH = Engine("opensearch", "OpenSearch", "org.opensearch.distribution.integ-test-zip",
                    "OPENSEARCH", ())
ENGINES = {e.name: e for e in (ELASTICSEARCH, OPENSEARCH)}


@dataclass(frozen=True)
class Release:
    """A version the project is tested with: its archive's SHA-256 and the oldest JDK
    it runs on."""

    engine: Engine
    version: str
    sha256: str
    min_java: int


RELEASES = {
    (r.engine.name, r.version): r
    for r in (
        Release(ELASTICSEARCH, "8.19.21",
                "215d5f3dbf0609a149f6218a9e47b6ae2df34ebbff3c5754e35f15a5e5393c8a", 17),
        Release(ELASTICSEARCH, "9.1.0",
                "be5c5440bb6344cee4070f8f77a6c3cd72363db494944047cdd93748c4e19111", 21),
        Release(OPENSEARCH, "2.19.1",
                "af7152d8b7f6f1cee09d47276b32b70479fe6dd8cdbb61213f84eb7f8098b261", 17),
        Release(OPENSEARCH, "3.3.0",
                "c3a6bf825ea05b8d9fe3758dad70ed198cf9c365700895165d310a0a9e7f48a5", 21),
    )
}
#: The version of each engine used when none is named.
DEFAULT_VERSION = {"elasticsearch": "8.19.21", "opensearch": "3.3.0"}
#: The engine and version the whole test suite runs on by default.
ELASTICSEARCH_VERSION = DEFAULT_VERSION["elasticsearch"]
CENTRAL = "https://repo1.maven.org/maven2"


def release(engine: str, version: str | None = None) -> Release:
    """The tested release of ``engine`` (its default version when None); a clear error
    naming what is supported otherwise."""
    if engine not in ENGINES:
        raise LocalServerError(
            f"unknown search engine {engine!r}: expected one of {', '.join(ENGINES)}")
    version = version or DEFAULT_VERSION[engine]
    found = RELEASES.get((engine, version))
    if found is None:
        known = ", ".join(v for (e, v) in RELEASES if e == engine)
        raise LocalServerError(
            f"{ENGINES[engine].label} {version} is not a version Pathkeeper is tested with: "
            f"supported {known}")
    return found


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


def _download(rel: Release, into: Path) -> Path:
    """The archive of ``rel`` in ``into``: by Maven when it is installed (its local
    repository doubles as a cache and honours the machine's mirror settings), else over
    HTTPS from Maven Central."""
    group, artifact, version = rel.engine.group, rel.engine.artifact, rel.version
    name = f"{artifact}-{version}.zip"
    mvn = shutil.which("mvn")
    if mvn:
        result = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy",
             f"-Dartifact={group}:{artifact}:{version}:zip", f"-DoutputDirectory={into}"],
            capture_output=True, text=True, cwd=into,
        )
        if result.returncode == 0 and (into / name).is_file():
            return into / name
    url = f"{CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(into / name, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    except OSError as exc:
        raise LocalServerError(
            f"cannot download {rel.engine.label} {version} from {url}: {exc}"
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


def distribution(rel: Release) -> Path:
    """The unpacked distribution of ``rel`` (its home directory), fetched on first use."""
    root = cache_dir()
    base = f"{rel.engine.name}-{rel.version}"
    home = root / base
    launcher = home / "bin" / rel.engine.name
    if launcher.is_file():
        return home
    with _locked(root / f".{base}.lock"):
        if launcher.is_file():
            return home
        work = Path(tempfile.mkdtemp(prefix=f".{base}-", dir=root))
        try:
            archive = _download(rel, work)
            got = _sha256(archive)
            if got != rel.sha256:
                raise LocalServerError(
                    f"{rel.engine.label} {rel.version} archive has SHA-256 {got}, "
                    f"expected {rel.sha256}"
                )
            _unpack(archive, work / "unpacked")
            (work / "unpacked" / base).rename(home)
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


def find_java(rel: Release) -> Path:
    """A JDK ``rel`` runs on: ``<ENGINE>_JAVA_HOME`` (``ES_JAVA_HOME``,
    ``OPENSEARCH_JAVA_HOME``) when set, else the oldest JDK of at least its ``min_java``
    under /usr/lib/jvm or on the PATH (releases are tested most on the LTS JDK they
    were built for; a newer JDK is a fallback). ``JAVA_HOME`` is used only when it is
    new enough: it is often set for other programs."""
    min_java = rel.min_java
    var = f"{rel.engine.env}_JAVA_HOME"
    if os.environ.get(var):
        home = Path(os.environ[var])
        major = _java_major(home)
        if major is None or major < min_java:
            raise LocalServerError(
                f"{var}={home} is not a JDK {min_java} or newer, which "
                f"{rel.engine.label} {rel.version} needs")
        return home
    found: list[tuple[int, str, Path]] = []
    if os.environ.get("JAVA_HOME"):
        home = Path(os.environ["JAVA_HOME"])
        major = _java_major(home)
        if major is not None and major >= min_java:
            return home
    jvm = Path("/usr/lib/jvm")
    if jvm.is_dir():
        for home in jvm.iterdir():
            major = _java_major(home.resolve())
            if major is not None and major >= min_java:
                found.append((major, str(home.resolve()), home.resolve()))
    java = shutil.which("java")
    if java:
        home = Path(java).resolve().parent.parent
        major = _java_major(home)
        if major is not None and major >= min_java:
            found.append((major, str(home), home))
    if not found:
        raise LocalServerError(
            f"no JDK {min_java}+ found for {rel.engine.label} {rel.version}: install one or "
            f"set {var} (the test distribution carries no JDK of its own), or "
            "PATHKEEPER_SEARCH=noida to use the stand-in"
        )
    return min(found)[2]


#: A relative ``logs``/``data`` path in a JVM option (``file=logs/gc.log``,
#: ``-XX:HeapDumpPath=data``): OpenSearch's launcher resolves them against its home,
#: which is the shared cache, not the node's own directory.
_RELATIVE_JVM_PATH = re.compile(r"(?<=[=:])(logs|data)(?=/|\s|$)", re.MULTILINE)


def _absolute_jvm_paths(options: Path, node: Path) -> None:
    """Point the JVM's log, GC log and heap dump files into the node's directory."""
    text = options.read_text()
    options.write_text(_RELATIVE_JVM_PATH.sub(lambda m: str(node / m.group(1)), text))


def _run_as() -> pwd.struct_passwd | None:
    """The user the node runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("PATHKEEPER_ES_USER", "nobody")
    try:
        return pwd.getpwnam(name)
    except KeyError as exc:
        raise LocalServerError(
            f"the search node refuses to run as root and user {name!r} does not exist "
            "(set PATHKEEPER_ES_USER)"
        ) from exc


class LocalSearchNode(LocalServer):
    """A running single search node (see ``LocalServer``) of ``engine`` and ``version``
    (default: the engine's default version)."""

    health_path = "/_cluster/health?wait_for_status=yellow&timeout=1s"

    def __init__(
        self,
        data_dir: str | Path | None = None,
        port: int = 0,
        startup_timeout: float = 180.0,
        *,
        engine: str = "elasticsearch",
        version: str | None = None,
        heap: str | None = None,
        settings: Mapping[str, str] | None = None,
        java_options: Sequence[str] = (),
    ) -> None:
        """``settings``: more lines of the node's configuration (e.g. a small
        ``http.max_content_length`` to meet the server's request limit in a test)."""
        super().__init__(data_dir, port, startup_timeout)
        self.release = release(engine, version)
        self.label = f"{self.release.engine.label} {self.release.version}"
        self.settings = dict(settings or {})
        self.heap = heap or os.environ.get("PATHKEEPER_ES_HEAP", "1g")
        self.java_options = list(java_options)
        self.transport_port = 0

    @property
    def engine(self) -> Engine:
        return self.release.engine

    @property
    def version(self) -> str:
        return self.release.version

    def discovery_lines(self) -> list[str]:
        """The lines of the configuration that name the node and its cluster: a cluster
        of its own (``pathkeeper.local.search_cluster`` joins nodes into one)."""
        return ["cluster.name: pathkeeper-local", "node.name: local",
                "discovery.type: single-node"]

    def command(self) -> tuple[list[str], dict[str, str], dict[str, Any]]:
        rel = self.release
        home = distribution(rel)
        java = find_java(rel)
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
            _absolute_jvm_paths(conf / "jvm.options", node)
        (conf / f"{rel.engine.name}.yml").write_text("\n".join([
            *self.discovery_lines(),
            "network.host: 127.0.0.1",
            f"http.port: {self.port}",
            f"transport.port: {self.transport_port}",
            *rel.engine.security_off,
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
        prefix = rel.engine.env
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            f"{prefix}_JAVA_HOME": str(java),
            f"{prefix}_PATH_CONF": str(conf),
            f"{prefix}_TMPDIR": str(node / "tmp"),
            f"{prefix}_JAVA_OPTS": " ".join(
                [f"-Xms{self.heap}", f"-Xmx{self.heap}", *self.java_options]),
            "LANG": "C.UTF-8",
        }
        if user is not None:
            env["HOME"] = str(node)
        return [str(home / "bin" / rel.engine.name)], env, extra
