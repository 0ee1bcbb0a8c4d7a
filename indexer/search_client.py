"""Opening the search server from an operator's URL: which engine it is (asked of the
server, or named by ``PATHKEEPER_SEARCH_ENGINE``), and that engine's adapter of the
seam (``indexer.search_engine``).

The server is asked on first use, not on opening: a worker or the HTTP service may
start before the search server does, and back off until it answers.

A secured server is reached with a ``SearchSecurity``: basic auth or an API key, the CA
that signs its certificate, or an Elastic Cloud id for its address. The engine check
and the engine's client use the same one; its secrets never show in a repr, a log line
or an error message."""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, cast

from coordinator.errors import InvalidConfiguration

from .search_engine import (
    ENGINES,
    SUPPORTED,
    SearchAuthFailed,
    SearchEngine,
    SearchTlsFailed,
    SearchUnavailable,
    UnsupportedEngine,
    error_of,
    server_address,
    supported_text,
    unreachable,
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


def cloud_url(cloud_id: str) -> str:
    """The https endpoint of the Elasticsearch deployment an Elastic Cloud id names:
    ``<name>:<base64 of domain[:port]$es-id[:port]$kibana-id>``, port 443 unless one is
    given (the decoding Elastic's clients do)."""
    _name, _sep, encoded = cloud_id.strip().partition(":")
    try:
        parts = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
        domain, es_id, *_kibana = parts.split("$")
        es_id, _sep, es_port = es_id.partition(":")
        domain, _sep, port = domain.partition(":")
        number = int(es_port or port or 443)
    except (ValueError, UnicodeError):
        domain = es_id = ""
        number = 0
    if not domain or not es_id or not 0 < number < 65536:
        raise InvalidConfiguration(
            "the search cloud id cannot be parsed; expected <name>:<base64>, as the "
            "deployment's page shows it"
        )
    return f"https://{es_id}.{domain}:{number}"


@dataclass(frozen=True)
class SearchSecurity:
    """How Pathkeeper proves who it is to a secured search server and checks that the
    server is the one meant.

    ``user`` and ``password``: basic auth; ``api_key``: an API key, encoded as the
    server hands it out (or as ``id:key``); ``ca_certs``: a PEM file of the CA(s) that
    sign the server's certificate (default: the system's); ``cloud_id``: an Elastic
    Cloud deployment, whose https endpoint becomes the URL. The password and the key
    are left out of the repr."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    cloud_id: str | None = None

    def __post_init__(self) -> None:
        if self.password is not None and not self.user:
            raise InvalidConfiguration("a search password needs a search user (--search-user)")
        if self.user and self.password is None:
            raise InvalidConfiguration(
                f"search user {self.user!r} needs a password (--search-password or "
                "--search-password-file)"
            )
        if self.user and self.api_key is not None:
            raise InvalidConfiguration(
                "give the search server a user and password or an API key, not both"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise InvalidConfiguration("the search API key is empty")
        if self.ca_certs is not None:
            if not os.access(self.ca_certs, os.R_OK):
                raise InvalidConfiguration(
                    f"the search CA certificate file {self.ca_certs} cannot be read"
                )
            try:
                self.ssl_context()
            except (ssl.SSLError, ValueError):
                raise InvalidConfiguration(
                    f"the search CA certificate file {self.ca_certs} holds no PEM "
                    "certificate"
                ) from None
        if self.cloud_id is not None:
            cloud_url(self.cloud_id)

    def url(self, es_url: str | None) -> str | None:
        """The search server's URL: ``es_url``, or the cloud id's endpoint."""
        if self.cloud_id is None:
            return es_url
        if es_url:
            raise InvalidConfiguration(
                "give the search server's URL or its cloud id, not both"
            )
        return cloud_url(self.cloud_id)

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header these credentials send (none without any)."""
        if self.user and self.password is not None:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {token}"}
        if self.api_key is not None:
            return {"Authorization": f"ApiKey {self.encoded_api_key()}"}
        return {}

    def encoded_api_key(self) -> str:
        key = (self.api_key or "").strip()
        if ":" in key:  # id:key, as the API key's creation answers it unencoded
            return base64.b64encode(key.encode()).decode()
        return key

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of the ``elasticsearch`` client (the OpenSearch adapter
        translates them)."""
        options: dict[str, Any] = {}
        if self.user and self.password is not None:
            options["basic_auth"] = (self.user, self.password)
        if self.api_key is not None:
            options["api_key"] = self.encoded_api_key()
        if self.ca_certs is not None:
            options["ca_certs"] = self.ca_certs
        return options

    def ssl_context(self) -> ssl.SSLContext:
        """What an https connection trusts: the CA file, else the system's CAs."""
        return ssl.create_default_context(cafile=self.ca_certs)


NO_SECURITY = SearchSecurity()


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
        headers = SearchSecurity(user=urllib.parse.unquote(parts.username),
                                 password=urllib.parse.unquote(parts.password or "")).headers()
    host = parts.netloc.rsplit("@", 1)[-1]  # without the credentials
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", "")), headers


def _get(base: str, headers: dict[str, str], path: str,
         security: SearchSecurity = NO_SECURITY) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(base + path, headers=headers)
    # As the clients do: straight to the server, whatever proxy the environment names.
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=security.ssl_context()),
    )
    try:
        with opener.open(request, timeout=DETECT_TIMEOUT) as resp:
            status, got, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, got, raw = exc.code, dict(exc.headers), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        failure = unreachable(base, f"{type(reason).__name__}: {reason}")
        if isinstance(failure, SearchTlsFailed):
            raise failure from None
        raise SearchUnavailable(f"cannot reach the search server: {exc}", base) from None
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return status, {k.lower(): v for k, v in got.items()}, body


def detect(url: str, security: SearchSecurity = NO_SECURITY) -> Found:
    """Ask the server at ``url`` what it is, with ``security``'s credentials and CA.
    Elasticsearch names itself in a header of every answer (``X-Elastic-Product``);
    OpenSearch in ``GET /`` (``version.distribution``). Raises ``SearchAuthFailed``
    when the server refuses the credentials, ``SearchTlsFailed`` when TLS fails,
    ``UnsupportedEngine`` for anything else."""
    base, headers = _split_url(url)
    headers = {**security.headers(), **headers}
    status, got, body = _get(base, headers, "/", security)
    if status == 401:
        _error, reason = error_of(body)
        raise SearchAuthFailed(
            401, "security_exception",
            f"the search server at {base} refused the credentials: "
            f"{reason or 'authentication required'}", body,
        )
    if got.get("x-elastic-product") == "Elasticsearch":
        _s, _h, nodes = _get(base, headers, "/_nodes/_local?filter_path=nodes.*.version",
                             security)
        versions = [n.get("version", "?") for n in (nodes or {}).get("nodes", {}).values()]
        return Found("elasticsearch", versions[0] if versions else "?")
    version = body.get("version") if isinstance(body, dict) else None
    if status == 200 and isinstance(version, dict):
        distribution = str(version.get("distribution") or "elasticsearch")
        return Found(distribution, str(version.get("number", "?")))
    if status == 403:
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
    """The engine's client of ``url``. ``options`` hold the credentials: the
    ``ValueError`` of a client is replaced, never shown."""
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

    def __init__(self, url: str, engine: str | None, security: SearchSecurity,
                 options: dict[str, Any]) -> None:
        self._url = url
        self._engine = engine
        self._security = security
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
                    what = detect(self._url, self._security)
                    check_supported(what)
                    engine = what.engine
                options = {**self._options, **self._security.client_options()}
                self._found = _adapter(engine, self._url, options)
            return self._found

    def close(self) -> None:
        with self._lock:
            if self._found is not None:
                self._found.close()

    def __repr__(self) -> str:
        return f"<search server {server_address(self._url)} ({self._engine or 'engine asked'})>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._resolve(), name)


def open_search(url: str, *, engine: str | None = None,
                security: SearchSecurity | None = None, **options: Any) -> SearchEngine:
    """The search server at ``url`` behind the seam. ``engine`` (else
    ``PATHKEEPER_SEARCH_ENGINE``) names it; otherwise the server is asked on first use.
    ``security``: credentials and CA, for the engine check and the client alike.
    ``options``: the client's (``request_timeout``...). Raises ``InvalidConfiguration``
    for a URL that cannot be used and ``UnsupportedEngine`` for an unknown engine name;
    the first call raises ``UnsupportedEngine`` for a server that is not a supported
    engine and version."""
    base, _headers = _split_url(url)
    security = security or NO_SECURITY
    if security.ca_certs is not None and base.startswith("http:"):
        raise InvalidConfiguration(
            f"a CA certificate (--search-ca-certs) is for an https:// search server; "
            f"{base} is plain http"
        )
    if engine is not None and engine not in ENGINES:
        raise UnsupportedEngine(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return cast(SearchEngine, _OnFirstUse(url, engine or named_engine(), security, options))
