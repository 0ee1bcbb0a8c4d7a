"""Opening the search server from an operator's URL: which engine it is (asked of the
server, or named by ``PATHKEEPER_SEARCH_ENGINE``), and that engine's adapter of the
seam (``indexer.search_engine``).

The server is asked on first use, not on opening: a worker or the HTTP service may
start before the search server does, and back off until it answers."""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, cast

from coordinator.errors import InvalidConfiguration

from .search_engine import (
    ENGINES,
    SUPPORTED,
    SearchEngine,
    SearchUnavailable,
    UnsupportedEngine,
    supported_text,
)

#: Names the engine and skips asking the server (e.g. when its node info is
#: forbidden to our user): elasticsearch or opensearch.
ENGINE_ENV = "PATHKEEPER_SEARCH_ENGINE"
DETECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Found:
    """What a server said it is."""

    engine: str
    version: str

    @property
    def major(self) -> int:
        head = self.version.split(".", 1)[0]
        return int(head) if head.isdigit() else 0

    def label(self) -> str:
        return f"{self.engine} {self.version}"


def check_supported(found: Found) -> None:
    """Raise ``UnsupportedEngine`` unless ``found`` is an engine and major version
    Pathkeeper supports."""
    majors = SUPPORTED.get(found.engine)
    if majors is None or found.major not in majors:
        raise UnsupportedEngine(
            f"the search server is {found.label()}; supported: {supported_text()}"
        )


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL without credentials, and the headers that carry them."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidConfiguration(
            "the search server URL cannot be parsed; expected http(s)://host:port"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise InvalidConfiguration(
            "the search server URL cannot be parsed; expected http(s)://host:port"
        ) from None
    headers: dict[str, str] = {}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    host = parts.netloc.rsplit("@", 1)[-1]  # without the credentials
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", "")), headers


def _get(base: str, headers: dict[str, str], path: str) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(base + path, headers=headers)
    # As the clients do: straight to the server, whatever proxy the environment names.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=DETECT_TIMEOUT) as resp:
            status, got, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, got, raw = exc.code, dict(exc.headers), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise SearchUnavailable(f"cannot reach the search server: {exc}") from None
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return status, {k.lower(): v for k, v in got.items()}, body


def detect(url: str) -> Found:
    """Ask the server at ``url`` what it is. Elasticsearch names itself in a header of
    every answer (``X-Elastic-Product``); OpenSearch in ``GET /``
    (``version.distribution``). Raises ``UnsupportedEngine`` for anything else."""
    base, headers = _split_url(url)
    status, got, body = _get(base, headers, "/")
    if got.get("x-elastic-product") == "Elasticsearch":
        _s, _h, nodes = _get(base, headers, "/_nodes/_local?filter_path=nodes.*.version")
        versions = [n.get("version", "?") for n in (nodes or {}).get("nodes", {}).values()]
        return Found("elasticsearch", versions[0] if versions else "?")
    version = body.get("version") if isinstance(body, dict) else None
    if status == 200 and isinstance(version, dict):
        distribution = str(version.get("distribution") or "elasticsearch")
        return Found(distribution, str(version.get("number", "?")))
    if status in (401, 403):
        raise UnsupportedEngine(
            f"the search server answered {status} when asked what it is; name the engine "
            f"with {ENGINE_ENV}=elasticsearch|opensearch"
        )
    raise UnsupportedEngine(
        f"the search server is not one Pathkeeper knows (GET / answered {status}); "
        f"supported: {supported_text()}"
    )


def named_engine() -> str | None:
    """The engine named by configuration, if any (``UnsupportedEngine`` if unknown)."""
    name = os.environ.get(ENGINE_ENV, "").strip().lower()
    if not name:
        return None
    if name not in ENGINES:
        raise UnsupportedEngine(
            f"{ENGINE_ENV}={name!r}: expected one of {', '.join(ENGINES)}"
        )
    return name


def _adapter(engine: str, url: str, options: dict[str, Any]) -> SearchEngine:
    try:
        if engine == "opensearch":
            from .engine_opensearch import OpenSearchEngine

            return OpenSearchEngine.connect(url, **options)
        from .engine_elasticsearch import ElasticsearchEngine

        return ElasticsearchEngine.connect(url, **options)
    except ValueError:
        # Not the client's message: it repeats the URL, which may hold a password.
        raise InvalidConfiguration(
            "the search server URL cannot be parsed; expected http(s)://host:port"
        ) from None


class _OnFirstUse:
    """A ``SearchEngine`` that asks the server what it is on its first call (again on
    the next call if the server could not be reached), then hands every call to that
    engine's adapter."""

    def __init__(self, url: str, engine: str | None, options: dict[str, Any]) -> None:
        self._url = url
        self._engine = engine
        self._options = options
        self._found: SearchEngine | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _resolve(self) -> SearchEngine:
        found = self._found
        if found is not None:
            return found
        with self._lock:
            if self._found is None:
                engine = self._engine
                if engine is None:
                    what = detect(self._url)
                    check_supported(what)
                    engine = what.engine
                self._found = _adapter(engine, self._url, self._options)
            return self._found

    def close(self) -> None:
        with self._lock:
            if self._found is not None:
                self._found.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._resolve(), name)


def open_search(url: str, *, engine: str | None = None, **options: Any) -> SearchEngine:
    """The search server at ``url`` behind the seam. ``engine`` (else
    ``PATHKEEPER_SEARCH_ENGINE``) names it; otherwise the server is asked on first use.
    ``options``: the client's (``request_timeout``...). Raises ``InvalidConfiguration``
    for a URL that cannot be used and ``UnsupportedEngine`` for an unknown engine name;
    the first call raises ``UnsupportedEngine`` for a server that is not a supported
    engine and version."""
    _split_url(url)
    if engine is not None and engine not in ENGINES:
        raise UnsupportedEngine(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return cast(SearchEngine, _OnFirstUse(url, engine or named_engine(), options))
